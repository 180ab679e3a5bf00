"""A role's socket whose listen backlog is full (the daemon too busy to accept, as memoryd was
under the load test): a client waits for room and then talks normally, or gives up after its
connect timeout with PeerUnavailable. It never gets a socket that was not connected (asyncio's
own connect took the EAGAIN of a full AF_UNIX backlog for "in progress": reads then failed with
EINVAL, and loopd ended new sessions with an internal error).
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from bxcore.frames import Frame
from bxcore.framestream import FrameStream, PeerUnavailable


def full_listener(path) -> tuple[socket.socket, list[socket.socket]]:
    """A listener with a backlog of one, filled by connections nobody accepts."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    fillers = []
    while True:
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        filler.setblocking(False)
        try:
            filler.connect(str(path))
        except BlockingIOError:
            filler.close()
            return listener, fillers
        fillers.append(filler)


def test_a_full_backlog_ends_in_peer_unavailable_after_the_timeout(short_dir):
    listener, fillers = full_listener(short_dir / "busy.sock")
    try:
        with pytest.raises(PeerUnavailable, match="timed out"):
            asyncio.run(FrameStream.connect(short_dir / "busy.sock", timeout=0.3))
    finally:
        for sock in [listener, *fillers]:
            sock.close()


def test_a_client_waits_for_room_in_the_backlog_then_talks(short_dir):
    listener, fillers = full_listener(short_dir / "busy.sock")

    async def scenario() -> Frame:
        connecting = asyncio.create_task(FrameStream.connect(short_dir / "busy.sock", timeout=30))
        await asyncio.sleep(0.1)
        assert not connecting.done()  # still waiting for room
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        for _ in fillers:  # the daemon catches up: it accepts what was queued
            accepted, _addr = await loop.sock_accept(listener)
            accepted.close()
        stream = await connecting
        server_side, _addr = await loop.sock_accept(listener)
        try:
            await stream.write(Frame(kind="ping", final=True, body={}))
            data = await loop.sock_recv(server_side, 1024)
            assert data  # the frame arrived: the socket really is connected
            await loop.sock_sendall(server_side, data)
            return await stream.read(timeout=10)
        finally:
            server_side.close()
            await stream.close()

    try:
        echoed = asyncio.run(scenario())
    finally:
        for sock in [listener, *fillers]:
            sock.close()
    assert echoed.kind == "ping"
