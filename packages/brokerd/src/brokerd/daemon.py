"""``brokerd serve``: build the broker from the config, bind its sockets, tell systemd it is
ready, and run until SIGTERM or SIGINT.

State under ``[paths] home``: ``audit/`` (the hash-chained log), ``broker/sessions/`` (taint)
and ``egress/`` (every consult payload, when ``[consult]`` is configured).
Grants are read from ``[broker] grants``; an empty or missing directory is not fatal: brokerd
starts, denies every call, and says so loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sdnotify
from bxcore.config import Config
from bxcore.secrets import SecretStore

from .approvals import ApprovalBook, ApprovalDesk
from .audit import AuditLog
from .egresslog import CONSULT, ConsultEgress
from .grantstore import GrantStore
from .memory import MemoryClient
from .runner import Runner
from .sandbox import BubblewrapSandbox, PodmanSandbox, PodmanSetup, Sandbox, SandboxUnavailable
from .server import start
from .service import Broker
from .taint import TaintStore

log = logging.getLogger("brokerd")


def audit_dir(config: Config) -> Path:
    return config.paths.home / "audit"


def taint_dir(config: Config) -> Path:
    return config.paths.home / "broker" / "sessions"


def egress_dir(config: Config) -> Path:
    return config.paths.home / "egress"


def now() -> datetime:
    return datetime.now(UTC)


def backend_for(config: Config) -> Sandbox:
    """The configured sandbox backend; SandboxUnavailable (a BoxmakerError) says what is missing."""
    section = config.broker
    if section.backend == "podman":
        if section.podman_image is None or section.containers_conf is None:
            raise SandboxUnavailable("[broker] backend = 'podman' needs podman_image and "
                                     "containers_conf")
        return PodmanSandbox(PodmanSetup(image=section.podman_image,
                                         containers_conf=section.containers_conf))
    toolkit = section.toolkit_dir or _installed_toolkit()
    return BubblewrapSandbox(toolkit_dir=toolkit)


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
    book = ApprovalBook(frozenset(section.approvers), timedelta(seconds=section.approval_timeout))
    desk = ApprovalDesk(book, clock=now,
                        gateway_socket=section.gateway_socket or config.socket("gateway"),
                        waiting_interval=section.waiting_interval)
    consult = None if config.consult is None else ConsultEgress(config.consult,
                                                                 egress_dir(config))
    runner = Runner(backend=backend,
                    memory=MemoryClient(config.memory.socket or config.socket("memory")),
                    audit=audit, taints=taints, result_cap=section.result_cap, consult=consult)
    grants = GrantStore(section.grants_dir())
    grants.current()  # load now, so a broken or empty grants directory is reported at start
    return Broker(grants=grants, audit=audit, taints=taints, desk=desk, runner=runner,
                  secrets=secrets, clock=now,
                  configured={CONSULT: consult.settings} if consult is not None else None)


async def serve(config: Config, backend: Sandbox) -> None:
    broker = build(config, backend)
    broker_socket = config.broker.socket or config.socket("broker")
    approve_socket = config.broker.approve_socket or config.socket("approve")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    servers = await start(broker, broker_socket, approve_socket)
    try:
        sdnotify.SystemdNotifier().notify(f"READY=1\nSTATUS=serving {broker_socket}")
        log.info("serving %s and %s", broker_socket, approve_socket)
        await stop.wait()
        log.info("stopping")
    finally:
        for server in servers:
            server.close()
        for path in (broker_socket, approve_socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
