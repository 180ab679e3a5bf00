"""``brokerd serve``: build the broker from the config, bind its sockets, tell systemd it is
ready, and run until SIGTERM or SIGINT.

State under ``[paths] home``: ``audit/`` (the hash-chained log), ``broker/sessions/`` (taint)
and ``egress/`` (every consult payload, when ``[consult]`` is configured).
Grants are read from ``[broker] grants``; an empty or missing directory is not fatal: brokerd
starts, denies every call, and says so loudly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bxcore.config import Config, served_sockets
from bxcore.config.broker import LOCAL_UID
from bxcore.daemon import Notifier, listening, run_until_signalled, wait_forever
from bxcore.peers import PeerPolicy
from bxcore.protocol.approval import FROM_APPROVE_SOCKET, TO_APPROVE_SOCKET
from bxcore.protocol.broker import FROM_BROKERD, TO_BROKERD
from bxcore.secrets import SecretStore

from .approvals import ApprovalBook, ApprovalDesk
from .audit import AuditLog, entries
from .egresslog import CONSULT, ConsultEgress
from .grantstore import GrantStore, real_path
from .memory import MemoryClient
from .policy._protected import Protected
from .provenance import ProvenanceStore
from .runner import Runner
from .sandbox import BubblewrapSandbox, PodmanSandbox, PodmanSetup, Sandbox, SandboxUnavailable
from .sandbox._workspace import default_scratch_root
from .server import connection, handlers
from .service import Broker
from .taint import TaintStore, reconcile

log = logging.getLogger("brokerd")


def audit_dir(config: Config) -> Path:
    return config.paths.home / "audit"


def taint_dir(config: Config) -> Path:
    return config.paths.home / "broker" / "sessions"


def provenance_file(config: Config) -> Path:
    return config.paths.home / "broker" / "provenance.jsonl"


def egress_dir(config: Config) -> Path:
    return config.paths.home / "egress"


def now() -> datetime:
    return datetime.now(UTC)


def backend_for(config: Config) -> Sandbox:
    """The configured sandbox backend; SandboxUnavailable (a BoxmakerError) says what is missing."""
    section = config.broker
    if section.backend == "podman":
        if section.podman_image is None:
            raise SandboxUnavailable("[broker] backend = 'podman' needs podman_image")
        if section.containers_conf is None and section.podman_remote is None:
            raise SandboxUnavailable("[broker] backend = 'podman' needs containers_conf "
                                     "(or podman_remote, a podman service)")
        setup = PodmanSetup(image=section.podman_image, containers_conf=section.containers_conf,
                            remote=section.podman_remote)
        return PodmanSandbox(setup, scratch_root=section.scratch,
                             sandbox_uid=section.sandbox_uid)
    toolkit = section.toolkit_dir or _installed_toolkit()
    return BubblewrapSandbox(toolkit_dir=toolkit, scratch_root=section.scratch,
                             sandbox_uid=section.sandbox_uid)


def local_uids(approvers: list[str]) -> frozenset[int]:
    """The uids ``local:<uid>`` approvers name."""
    return frozenset(int(a.removeprefix("local:")) for a in approvers if LOCAL_UID.fullmatch(a))


def harness_paths(config: Config, environ: Mapping[str, str]) -> tuple[Protected, ...]:
    """The harness's own directories and files, which no grant may reach (resolved)."""
    section = config.broker
    found = [
        (config.paths.home, "the state directory ([paths] home)"),
        (config.paths.run, "the sockets' directory ([paths] run)"),
        (section.grants_dir(), "the grants directory"),
        (section.jobs_dir(), "the jobs directory"),
        (section.scratch or default_scratch_root(), "the calls' scratch directory"),
    ]
    found += [(each.path.parent, f"the directory of {name}.sock")
              for name, each in served_sockets(config).items()]
    found += [(path.parent, f"the directory of secret {key!r}")
              for key, spec in config.secrets.items() if (path := spec.path) is not None]
    if credentials := environ.get("CREDENTIALS_DIRECTORY"):
        found.append((Path(credentials), "the credentials directory (CREDENTIALS_DIRECTORY)"))
    return tuple(Protected(path=real_path(str(path)), what=what) for path, what in found)


def _installed_toolkit() -> Path:
    # Located, not imported: brokerd never runs toolkit code itself, it bind-mounts it.
    spec = importlib.util.find_spec("toolkit")
    if spec is None or not spec.submodule_search_locations:
        raise SandboxUnavailable("the toolkit package is not installed; set [broker] toolkit_dir")
    return Path(next(iter(spec.submodule_search_locations)))


def build(config: Config, backend: Sandbox) -> Broker:
    section = config.broker
    if not section.approvers:
        log.warning("[broker] approvers is empty: every 'ask' call will expire and be denied")
    secrets = SecretStore(config.secrets)
    secrets.warn_plaintext()
    audit = AuditLog(audit_dir(config), rotate_bytes=section.audit_rotate_bytes)
    taints = TaintStore(taint_dir(config))
    logged = (e for e in entries(audit_dir(config), newest_only=True) if e.kind == "result")
    for session in reconcile(((e.session, e.data_class, e.untrusted) for e in logged), taints):
        log.warning("session %s: taint raised to match the audit log (a crash came between a "
                    "result and its taint file)", session)
    book = ApprovalBook(frozenset(section.approvers), timedelta(seconds=section.approval_timeout))
    desk = ApprovalDesk(book, clock=now,
                        gateway_socket=config.served("gateway").path,
                        waiting_interval=section.waiting_interval)
    consult = None if config.consult is None else ConsultEgress(config.consult,
                                                                 egress_dir(config))
    runner = Runner(backend=backend,
                    memory=MemoryClient(config.served("memory").path),
                    audit=audit, taints=taints, result_cap=section.result_cap, consult=consult,
                    provenance=ProvenanceStore(provenance_file(config)), clock=now)
    grants = GrantStore(section.grants_dir(), harness_paths(config, os.environ))
    grants.current()  # load now, so a broken or empty grants directory is reported at start
    return Broker(grants=grants, audit=audit, taints=taints, desk=desk, runner=runner,
                  secrets=secrets, clock=now,
                  configured={CONSULT: consult.settings} if consult is not None else None,
                  floor=config.memory.identity_ceiling)


async def serve(config: Config, backend: Sandbox, source: str | Path = "config") -> None:
    """Until SIGTERM or SIGINT; ``source`` (the config file) names it in errors."""
    broker = build(config, backend)
    served = config.served("broker"), config.served("approve")
    groups = [each.gid(source) for each in served]
    notifier = Notifier()
    section_approvers = config.broker.approvers

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            for each, group, (kinds, sends), handle in zip(
                served, groups,
                ((TO_BROKERD, FROM_BROKERD), (TO_APPROVE_SOCKET, FROM_APPROVE_SOCKET)),
                handlers(broker), strict=True,
            ):
                handler = connection(each.path, kinds, handle, sends)
                # approve.sock also admits the uids its local:<uid> approvers name.
                extra = local_uids(section_approvers) if each.name == "approve" else frozenset()
                await stack.enter_async_context(listening(
                    each.path, handler, mode=each.mode, group=group,
                    peers=PeerPolicy(uids=extra, group=group),
                ))
            notifier.ready(f"serving {served[0].path}")
            log.info("serving %s and %s", served[0].path, served[1].path)
            await wait_forever()

    await run_until_signalled(main(), on_stop=notifier.stopping)
    log.info("stopped")
