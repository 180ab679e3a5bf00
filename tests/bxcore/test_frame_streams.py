"""The I/O shells over real sockets: FrameStream (asyncio) and SyncFrameSocket (blocking).

Stream endings are named precisely (all of them StreamEnded): a clean close between frames is
StreamClosed, a close inside a frame is IncompleteFrame, a connection that breaks is
StreamBroken; a silent peer (or one that trickles a frame byte by byte past its deadline) is
StreamTimeout, a missing server PeerUnavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from bxcore.errors import (
    FrameError,
    IncompleteFrame,
    LocalProtocolError,
    StreamBroken,
    StreamClosed,
    StreamEnded,
    StreamTimeout,
    WireError,
)
from bxcore.frames import Frame, encode_frame
from bxcore.framestream import FrameStream, PeerUnavailable
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import loop

T = TypeVar("T")

TURN = Frame.of(loop.TURN, loop.Turn(session="s1", content="hi", resume=False), final=False)
DONE = Frame(kind=loop.TURN_DONE, final=True, body={"content": "Grüße", "usage": {}})
BIG = Frame(kind=loop.TURN_EVENT, final=False, body={"text": "x" * 300_000})  # > a read chunk


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield left, right
    left.close()
    right.close()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # A short path: a Unix socket path must fit in 108 bytes, pytest's tmp_path may not.
    directory = Path(tempfile.mkdtemp(prefix="bx-"))
    yield directory
    shutil.rmtree(directory)


# --- SyncFrameSocket ---------------------------------------------------------------------------


def test_sync_round_trip_over_a_socketpair(pair):
    left, right = pair
    sender = SyncFrameSocket(left)
    receiver = SyncFrameSocket(right, kinds=loop.TO_LOOPD | loop.FROM_LOOPD)
    # BIG is larger than a socket buffer: the writer needs a reader at the same time.
    def send_all() -> None:
        for frame in (TURN, BIG, DONE):
            sender.write(frame, timeout=10)

    writer = threading.Thread(target=send_all)
    writer.start()
    try:
        assert [receiver.read(timeout=10) for _ in range(3)] == [TURN, BIG, DONE]
    finally:
        writer.join(timeout=10)
    assert not writer.is_alive()


def test_sync_clean_close_is_stream_closed(pair):
    left, right = pair
    SyncFrameSocket(left).write(TURN)
    left.close()
    receiver = SyncFrameSocket(right)
    assert receiver.read(timeout=5) == TURN
    with pytest.raises(StreamClosed):
        receiver.read(timeout=5)


def test_sync_close_mid_frame_is_incomplete_frame(pair):
    left, right = pair
    left.sendall(encode_frame(TURN)[:-3])
    left.close()
    with pytest.raises(IncompleteFrame):
        SyncFrameSocket(right).read(timeout=5)


def test_sync_read_times_out_on_a_silent_peer(pair):
    _, right = pair
    with pytest.raises(StreamTimeout, match=r"no whole frame within 0\.05 s"):
        SyncFrameSocket(right).read(timeout=0.05)


def trickle(sock: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send ``data`` one byte at a time, a byte every 20 ms: each gap is far inside the read's
    timeout, the whole frame far outside it."""
    for byte in data:
        if stop.wait(0.02):
            return
        with contextlib.suppress(OSError):
            sock.send(bytes([byte]))


def test_sync_a_peer_trickling_one_byte_at_a_time_is_cut_off_at_the_frame_deadline(pair):
    left, right = pair
    stop = threading.Event()
    sender = threading.Thread(target=trickle, args=(left, encode_frame(TURN), stop))
    sender.start()
    try:
        with pytest.raises(StreamTimeout):
            SyncFrameSocket(right).read(timeout=0.3)
    finally:
        stop.set()
        sender.join()


def test_sync_write_times_out_when_the_peer_takes_nothing(pair):
    left, _ = pair
    with pytest.raises(StreamTimeout):
        SyncFrameSocket(left).write(BIG, timeout=0.05)  # bigger than the socket buffer


def test_sync_malformed_frame_is_a_frame_error(pair):
    left, right = pair
    left.sendall(b"\x00\x00\x00\x02[]")
    with pytest.raises(FrameError, match="not an object"):
        SyncFrameSocket(right).read(timeout=5)


def test_sync_unknown_kind_is_refused(pair):
    left, right = pair
    SyncFrameSocket(left).write(DONE)
    with pytest.raises(FrameError, match="unknown frame kind 'turn_done'"):
        SyncFrameSocket(right, kinds=loop.TO_LOOPD).read(timeout=5)


def test_sync_write_to_a_closed_peer_is_stream_broken_not_a_clean_close(pair):
    left, right = pair
    right.close()
    with pytest.raises(StreamBroken, match="broken"):
        SyncFrameSocket(left).write(BIG, timeout=5)


def test_sync_connect_to_a_missing_socket_is_peer_unavailable(socket_dir):
    with pytest.raises(PeerUnavailable, match="not running"):
        SyncFrameSocket.connect(socket_dir / "loop.sock", timeout=5)


def test_sync_connect_to_a_stale_socket_file_is_peer_unavailable(socket_dir):
    path = socket_dir / "loop.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays; nobody listens
    with pytest.raises(PeerUnavailable, match="not running"):
        SyncFrameSocket.connect(path, timeout=5)


def test_sync_request_and_answer_over_a_unix_socket(socket_dir):
    path = socket_dir / "loop.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer_one() -> None:
        conn, _ = server.accept()
        with SyncFrameSocket(conn, kinds=loop.TO_LOOPD) as peer:
            assert peer.read(timeout=5) == TURN
            peer.write(DONE)

    thread = threading.Thread(target=answer_one)
    thread.start()
    try:
        with SyncFrameSocket.connect(path, kinds=loop.FROM_LOOPD, timeout=5) as client:
            client.write(TURN)
            assert client.read(timeout=5) == DONE
            with pytest.raises(StreamClosed):
                client.read(timeout=5)
    finally:
        thread.join(timeout=10)
        server.close()
    assert not thread.is_alive()


# --- FrameStream (asyncio) ---------------------------------------------------------------------


def run_between(
    pair, scenario: Callable[[FrameStream, FrameStream], Awaitable[T]], kinds=None
) -> T:
    """Run ``scenario(sender, receiver)`` over the socketpair, closing both streams after."""

    async def main() -> T:
        a = FrameStream(*await asyncio.open_unix_connection(sock=pair[0]))
        b = FrameStream(*await asyncio.open_unix_connection(sock=pair[1]), kinds=kinds)
        try:
            return await scenario(a, b)
        finally:
            await a.close()
            await b.close()

    return asyncio.run(main())


def test_async_round_trip_over_a_socketpair(pair):
    async def scenario(a: FrameStream, b: FrameStream) -> list[Frame]:
        async def send_all() -> None:
            for frame in (TURN, BIG, DONE):
                await a.write(frame, timeout=10)

        sending = asyncio.create_task(send_all())
        got = [await b.read(timeout=10) for _ in range(3)]
        await sending
        return got

    assert run_between(pair, scenario) == [TURN, BIG, DONE]


def test_async_clean_close_is_stream_closed(pair):
    async def scenario(a: FrameStream, b: FrameStream) -> None:
        await a.write(TURN)
        await a.close()
        assert await b.read(timeout=5) == TURN
        with pytest.raises(StreamClosed):
            await b.read(timeout=5)

    run_between(pair, scenario)


def test_async_read_times_out_on_a_silent_peer(pair):
    async def scenario(a: FrameStream, b: FrameStream) -> None:
        with pytest.raises(StreamTimeout, match=r"no whole frame within 0\.05 s"):
            await b.read(timeout=0.05)

    run_between(pair, scenario)


def test_async_a_peer_trickling_one_byte_at_a_time_is_cut_off_at_the_frame_deadline():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()
    sender = threading.Thread(target=trickle, args=(left, encode_frame(TURN), stop))

    async def main() -> None:
        stream = FrameStream(*await asyncio.open_unix_connection(sock=right))
        sender.start()
        try:
            with pytest.raises(StreamTimeout):
                await stream.read(timeout=0.3)
        finally:
            stop.set()
            await stream.close()

    try:
        asyncio.run(main())
    finally:
        sender.join()
        left.close()


def test_async_write_times_out_when_the_peer_takes_nothing(pair):
    async def scenario(a: FrameStream, b: FrameStream) -> None:
        huge = Frame(kind=loop.TURN_EVENT, final=False, body={"text": "x" * 4_000_000})
        with pytest.raises(StreamTimeout):  # more than the buffers of both ends hold
            await a.write(huge, timeout=0.05)

    run_between(pair, scenario)


def test_async_unknown_kind_is_refused(pair):
    async def scenario(a: FrameStream, b: FrameStream) -> None:
        await a.write(TURN)
        with pytest.raises(FrameError, match="unknown frame kind 'turn'"):
            await b.read(timeout=5)

    run_between(pair, scenario, kinds=loop.FROM_LOOPD)


def test_async_close_mid_frame_is_incomplete_frame(pair):
    left, right = pair
    left.sendall(encode_frame(BIG)[:70_000])  # fits in the socket buffer
    left.close()

    async def main() -> None:
        b = FrameStream(*await asyncio.open_unix_connection(sock=right))
        with pytest.raises(IncompleteFrame, match="70000 bytes of it arrived"):
            await b.read(timeout=5)
        await b.close()

    asyncio.run(main())


def test_async_connect_to_a_missing_socket_is_peer_unavailable(socket_dir):
    async def main() -> None:
        with pytest.raises(PeerUnavailable, match="not running"):
            await FrameStream.connect(socket_dir / "none.sock", timeout=5)

    asyncio.run(main())


def test_async_client_and_server_over_a_unix_socket(socket_dir):
    path = socket_dir / "loop.sock"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = FrameStream(reader, writer, kinds=loop.TO_LOOPD)
        assert await peer.read(timeout=5) == TURN
        await peer.write(DONE)
        await peer.close()

    async def main() -> Frame:
        server = await asyncio.start_unix_server(handle, path=str(path))
        async with server:
            client = await FrameStream.connect(path, kinds=loop.FROM_LOOPD, timeout=5)
            await client.write(TURN)
            answer = await client.read(timeout=5)
            with pytest.raises(StreamClosed):
                await client.read(timeout=5)
            await client.close()
        return answer

    assert asyncio.run(main()) == DONE


@pytest.mark.parametrize("ending", [StreamClosed, IncompleteFrame, StreamBroken])
def test_every_way_a_stream_ends_is_stream_ended_and_none_is_another(ending):
    assert issubclass(ending, StreamEnded)
    others = {StreamClosed, IncompleteFrame, StreamBroken} - {ending}
    assert not any(issubclass(ending, other) for other in others)


# --- our own bad frame: LocalProtocolError, nothing written (bxcore.daemon.answering answers it) -


def test_async_our_bad_frame_raises_local_protocol_error_and_writes_nothing(pair):
    async def scenario(loopd: FrameStream, channel: FrameStream) -> None:
        ours = FrameStream(loopd._reader, loopd._writer, sends=loop.FROM_LOOPD)
        with pytest.raises(LocalProtocolError, match="frame 'turn' is not a kind this side"):
            await ours.write(TURN)
        answer = Frame.of(loop.ERROR, WireError(code="internal", message="m"), final=True)
        await ours.write(answer)  # the stream is still at a frame boundary
        assert await channel.read(timeout=5) == answer

    run_between(pair, scenario, kinds=loop.FROM_LOOPD)
