"""A stop ends every connection and starts none: ``end_calls`` cancels the connections being
served, and a connection whose task starts after the stop began (asyncio accepted it just
before the listener closed) is closed unanswered, its handler never run. CI caught the second:
a call allowed after "stopped", its sandbox never killed, brokerd alive 120 s after SIGTERM."""

from __future__ import annotations

import asyncio
import socket

from brokerd.sockets import Connections, end_calls, tracked


async def _streams() -> tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter],
                              tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return (await asyncio.open_unix_connection(sock=ours),
            await asyncio.open_unix_connection(sock=theirs))


def test_a_connection_that_starts_after_the_stop_is_closed_and_its_handler_never_runs():
    handled: list[str] = []

    async def handle(_reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        handled.append("ran")

    async def scenario() -> bytes:
        connections = Connections()
        await end_calls(connections, timeout=1.0)  # nothing running yet: the stop is quick
        (reader, writer), (peer, _) = await _streams()
        await tracked(handle, connections)(reader, writer)
        return await peer.read()

    assert asyncio.run(scenario()) == b""  # the peer sees the connection closed
    assert handled == []


def test_the_stop_cancels_a_connection_being_served_and_waits_for_its_cleanup():
    events: list[str] = []

    async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        events.append("started")
        try:
            await asyncio.Event().wait()
        finally:
            events.append("cleaned up")
            writer.close()

    async def scenario() -> None:
        connections = Connections()
        (reader, writer), _ = await _streams()
        served = asyncio.create_task(tracked(handle, connections)(reader, writer))
        while not connections.tasks:
            await asyncio.sleep(0)
        await end_calls(connections, timeout=5.0)
        assert served.done() and not connections.tasks

    asyncio.run(scenario())
    assert events == ["started", "cleaned up"]
