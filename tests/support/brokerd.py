"""brokerd's sockets bound the simple way, for tests: both with the default mode, no group, the
kernel's overflow uid. ``brokerd serve`` (brokerd.sockets) binds them with the configured modes
and groups instead."""

from __future__ import annotations

import asyncio
from pathlib import Path

from brokerd.calls import Broker
from brokerd.sockets import handlers
from bxcore import daemon
from bxcore.peers import PeerPolicy


async def bind(path: Path, handle: daemon.Handler) -> asyncio.AbstractServer:
    """Listen on ``path`` (bxcore.daemon: born with the default mode, a stale file replaced,
    peers checked as the daemon checks them)."""
    sock = daemon.bind_unix_socket(path, mode=daemon.DEFAULT_MODE)
    gated = daemon.gate_peers(path, handle, PeerPolicy(group=None))
    return await asyncio.start_unix_server(gated, sock=sock)


async def start(
    broker: Broker, broker_socket: Path, approve_socket: Path
) -> list[asyncio.AbstractServer]:
    """broker.sock and approve.sock for ``broker``."""
    tool_call, approval = handlers(broker)
    return [await bind(broker_socket, tool_call), await bind(approve_socket, approval)]
