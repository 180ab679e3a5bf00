"""bxcore.daemon's ``listening`` for the one role (inferproxy) that takes each admitted
connection as a bare socket: the same bind, mode, peer check and clean-up (bxcore.daemon's), no
stream. No other role listens this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from .daemon import BACKLOG, DEFAULT_MODE, bound_socket, log_refusal
from .peers import Listener, PeerPolicy, check_peer, listener

log = logging.getLogger("bxcore.accepting")

ACCEPT_RETRY = 1.0  # seconds to pause accepting after EMFILE and the like, as asyncio does


@contextlib.asynccontextmanager
async def accepting(
    path: Path,
    on_connection: Callable[[socket.socket], None],
    *,
    mode: int = DEFAULT_MODE,
    group: str | int | None = None,
    peers: PeerPolicy | None = None,
) -> AsyncIterator[None]:
    """``listening`` for a role that wants each admitted connection as a bare non-blocking
    socket, handed to ``on_connection`` from the accepting callback: no transport, stream or
    task is made for it. inferproxy takes one connection per completion and splices it, and
    asyncio's server machinery was most of its cost a connection (docs/decisions/inferproxy.md)."""
    loop = asyncio.get_running_loop()
    me = listener()
    retry: asyncio.TimerHandle | None = None  # at most one: accepting stops until it runs
    with bound_socket(path, mode, group, peers) as (sock, policy):
        sock.setblocking(False)

        def ready() -> None:
            nonlocal retry
            for _ in range(BACKLOG):  # then let the loop run other callbacks
                try:
                    conn, _ = sock.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:  # out of descriptors or memory: pause, as asyncio does
                    log.error("%s: cannot accept: %s; retrying in %g s", path, exc, ACCEPT_RETRY)
                    loop.remove_reader(sock.fileno())
                    retry = loop.call_later(ACCEPT_RETRY, loop.add_reader, sock.fileno(), ready)
                    return
                if _admitted(path, conn, me, policy):
                    on_connection(conn)

        loop.add_reader(sock.fileno(), ready)
        try:
            yield
        finally:
            if retry is not None:
                retry.cancel()
            loop.remove_reader(sock.fileno())


def _admitted(path: Path, conn: socket.socket, me: Listener, policy: PeerPolicy) -> bool:
    """Whether ``accepting`` hands ``conn`` on, made non-blocking; if not, it is closed."""
    try:
        conn.setblocking(False)
        peer, refused = check_peer(conn, me, policy)
    except OSError as exc:  # the peer is gone already
        log.warning("%s: cannot check a connection's peer: %s", path, exc)
        conn.close()
        return False
    if refused is not None:
        log_refusal(path, peer, refused)
        conn.close()
        return False
    return True


__all__ = ["ACCEPT_RETRY", "accepting"]
