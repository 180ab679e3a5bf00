"""brokerd's parts, built from the config: the sandbox backend, the audit log, taint, the
approval desk, the runner, the grants, and the Broker (calls.py) over them. No socket is opened
here: sockets.py binds broker.sock and approve.sock.

State under ``[paths] home``: ``audit/`` (the hash-chained log), ``broker/sessions/`` (taint),
``broker/labels.jsonl`` (the mount labels, brokerd.labels) and ``egress/`` (every consult
payload, when ``[consult]`` is configured).
Grants are read from ``[broker] grants``; an empty or missing directory is not fatal: brokerd
starts, denies every call, and says so loudly.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import resource
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bxcore.config import Config, served_sockets
from bxcore.secrets import SecretStore

from .approvals import ApprovalBook, ApprovalDesk
from .audit import AuditLog, entries, taint_marks
from .calls import Broker
from .egresslog import CONSULT, ConsultEgress
from .grantstore import GrantStore, real_path
from .labelstore import LabelStore
from .memory import MemoryClient
from .ownerfiles import ToolReach
from .policy._protected import Protected, code_paths
from .runner import Runner
from .sandbox import BubblewrapSandbox, PodmanSandbox, PodmanSetup, Sandbox, SandboxUnavailable
from .sandbox._call import default_scratch_root
from .taint import TaintStore, reconcile
from .unfinished import Unfinished
from .writeperiods import WritePeriods

log = logging.getLogger("brokerd")


def audit_dir(config: Config) -> Path:
    return config.paths.home / "audit"


def taint_dir(config: Config) -> Path:
    return config.paths.home / "broker" / "sessions"


def labels_file(config: Config) -> Path:
    return config.paths.home / "broker" / "labels.jsonl"


def periods_file(config: Config) -> Path:
    return config.paths.home / "broker" / "write-periods"


def recorded_reach(config: Config) -> ToolReach:
    """What tools can write and could have, from the files a running brokerd keeps (for the
    CLI: every root a call has written counts as writable now)."""
    written = LabelStore(labels_file(config)).written()
    return ToolReach(dict.fromkeys(written, True), tools_uid(config),
                     WritePeriods(periods_file(config)).read())


def labels_lock(config: Config) -> Path:
    """Held by ``brokerd serve`` while it runs, and by ``brokerd labels lower``."""
    return config.paths.home / "broker" / "labels.lock"


def egress_dir(config: Config) -> Path:
    return config.paths.home / "egress"


def instance_of(config: Config) -> str:
    """This brokerd's name on the sandboxes it starts: one per state directory, since two
    brokerds never serve one (``labels.lock``)."""
    return hashlib.sha256(str(config.paths.home.resolve()).encode("utf-8")).hexdigest()[:16]


def all_descriptors() -> None:
    """Raise this process's soft limit on open descriptors to its hard limit: each running call
    holds about eight (its connection, pipes, seccomp filter, lifeline, a pin per mount), and
    1,024, a service's and a login shell's usual soft limit, ran out at about 110 calls a model
    kept running (attack 31k, K6). Its sandboxes set their own (OPEN_FILES)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def tools_uid(config: Config) -> int | None:
    """The uid tools run as when it is not brokerd's own: ``[broker] sandbox_uid`` as root."""
    return config.broker.sandbox_uid if os.geteuid() == 0 else None


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
                             sandbox_uid=section.sandbox_uid, owner=instance_of(config))
    toolkit = section.toolkit_dir or _installed_toolkit()
    return BubblewrapSandbox(toolkit_dir=toolkit, scratch_root=section.scratch,
                             sandbox_uid=section.sandbox_uid, owner=instance_of(config))


def harness_paths(config: Config, environ: Mapping[str, str],
                  config_file: Path | None = None) -> tuple[Protected, ...]:
    """The harness's own directories and files, which no grant may reach, and its code, which
    no grant may mount writable. Each path counts resolved and as configured: a symlink on the
    way (``[broker] grants`` naming a link in a writable tree) is the harness's too, or a tool
    could re-point it."""
    section = config.broker
    found = [
        (config.paths.home, "the state directory ([paths] home)"),
        (config.paths.run, "the sockets' directory ([paths] run)"),
        (section.grants_dir(), "the grants directory"),
        (section.jobs_dir(), "the jobs directory"),
        (section.scratch or default_scratch_root(), "the calls' scratch directory"),
    ]
    found += [(path, "a path of the harness ([paths] protected)")
              for path in config.paths.protected]
    if config_file is not None:
        found.append((config_file, "brokerd's config file"))
    found += [(each.path.parent, f"the directory of {name}.sock")
              for name, each in served_sockets(config).items()]
    if section.podman_remote is not None:  # the service that runs every tool's container
        service = Path(section.podman_remote.removeprefix("unix://"))
        found.append((service.parent, "the directory of the podman service's socket"))
    if section.containers_conf is not None:
        found.append((section.containers_conf, "podman's containers.conf ([broker])"))
    found += [(path.parent, f"the directory of secret {key!r}")
              for key, spec in config.secrets.items() if (path := spec.path) is not None]
    if credentials := environ.get("CREDENTIALS_DIRECTORY"):
        found.append((Path(credentials), "the credentials directory (CREDENTIALS_DIRECTORY)"))
    harness = [Protected(path=real_path(str(path)), what=what) for path, what in found]
    harness += [Protected(path=os.path.abspath(path), what=f"{what}, as configured")
                for path, what in found if os.path.abspath(path) != real_path(str(path))]
    return tuple(harness) + code_paths(section.toolkit_dir)


def _installed_toolkit() -> Path:
    # Located, not imported: brokerd never runs toolkit code itself, it bind-mounts it.
    spec = importlib.util.find_spec("toolkit")
    if spec is None or not spec.submodule_search_locations:
        raise SandboxUnavailable("the toolkit package is not installed; set [broker] toolkit_dir")
    return Path(next(iter(spec.submodule_search_locations)))


def build(config: Config, backend: Sandbox) -> Broker:
    return build_serving(config, backend)[0]


def build_serving(config: Config, backend: Sandbox,
                  config_file: Path | None = None) -> tuple[Broker, Unfinished]:
    """The Broker, and what closes the calls the audit log holds open (brokerd.unfinished)."""
    section = config.broker
    if not section.approvers:
        log.warning("[broker] approvers is empty: every 'ask' call will expire and be denied")
    secrets = SecretStore(config.secrets)
    secrets.warn_plaintext()
    audit = AuditLog(audit_dir(config), rotate_bytes=section.audit_rotate_bytes,
                     reserve_bytes=section.audit_reserve_bytes,
                     reserve_inodes=section.audit_reserve_inodes)
    taints = TaintStore(taint_dir(config))
    logged = taint_marks(entries(audit_dir(config), newest_only=True))
    for session in reconcile(logged, taints):
        log.warning("session %s: taint raised to match the audit log (a crash came between a "
                    "result and its taint file)", session)
    book = ApprovalBook(frozenset(section.approvers), timedelta(seconds=section.approval_timeout))
    desk = ApprovalDesk(book, clock=now,
                        gateway_socket=config.served("gateway").path,
                        waiting_interval=section.waiting_interval)
    consult = None if config.consult is None else ConsultEgress(config.consult,
                                                                 egress_dir(config))
    periods = WritePeriods(periods_file(config))
    periods.close_unfinished()  # after remove_leftovers: no earlier call's sandbox is left
    labels = LabelStore(labels_file(config), periods, section.max_running_calls)
    runner = Runner(backend=backend,
                    memory=MemoryClient(config.served("memory").path),
                    audit=audit, taints=taints, labels=labels,
                    result_cap=section.result_cap, consult=consult, clock=now)
    # The directory as it resolved at start: a symlink to it re-pointed later is not followed.
    uid = tools_uid(config)
    grants = GrantStore(Path(real_path(str(section.grants_dir()))),
                        harness_paths(config, os.environ, config_file),
                        lambda: ToolReach(labels.written(), uid, periods.read()))
    grants.current()  # load now, so a broken or empty grants directory is reported at start
    broker = Broker(grants=grants, audit=audit, taints=taints, desk=desk, runner=runner,
                    secrets=secrets, clock=now,
                    configured={CONSULT: consult.settings} if consult is not None else None,
                    floor=config.memory.identity_ceiling)
    return broker, Unfinished(audit, taints, grants, labels.labels)


def remove_leftovers(backend: Sandbox) -> None:
    """Before serving: a sandbox an earlier brokerd on this state left running (it was killed)
    is killed and waited for, so no mount is written by a call nobody counts as running:
    podman's containers, and a root brokerd's bubblewrap call groups; then the call
    workspaces it left, with their secrets."""
    if isinstance(backend, PodmanSandbox | BubblewrapSandbox):
        backend.remove_leftovers()
        backend.remove_scratch_leftovers()
