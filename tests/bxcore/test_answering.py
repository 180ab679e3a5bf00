"""bxcore.daemon.answering, the one connection runner of every role's frame socket.

It reads the request, makes one call on the role's answerer, and maps the outcome once:

- an answer: the answerer's final frame goes out (after any frame it sent on the way);
- the peer's fault: a frame it sent wrong (RemoteProtocolError) is answered ``bad_frame``, a
  ``Refused`` request its own code, with the error's message, logged at WARNING as the peer's;
- our bug: anything else, a LocalProtocolError among them, is answered ``internal`` without
  its details, logged at ERROR as ours with its traceback;
- a peer that goes away gets nothing and is not blamed;

and the connection is closed whatever happened.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

import pytest
from bxcore.daemon import Answerer, Connection, answering
from bxcore.errors import ErrorCode, Refused, RemoteProtocolError, StreamClosed, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import loop

LOG = logging.getLogger("test.role")
TURN = Frame.of(loop.TURN, loop.Turn(session="s1", content="hi", resume=False), final=False)
DONE = Frame(kind=loop.TURN_DONE, final=True, body={"content": "hello", "usage": {
    "cache_n": 0, "prompt_n": 1, "predicted_n": 1, "reasoning_tokens": 0,
    "thinking_capped": False}})
EVENT = Frame(kind=loop.TURN_EVENT, final=False, body={"event": {"type": "content",
                                                                 "text": "he"}})


def exchange(answer: Answerer, client: Callable[[FrameStream], Awaitable[list[Frame]]],
             unreadable: Callable[[RemoteProtocolError], Awaitable[None]] | None = None,
             ) -> list[Frame]:
    """Serve one connection with ``answering(answer)``; what ``client`` read from it. The
    server side must end by itself, whatever happened."""

    async def run() -> list[Frame]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        handler = answering(answer, receives=loop.TO_LOOPD, sends=loop.FROM_LOOPD, log=LOG,
                            unreadable=unreadable)
        server = asyncio.ensure_future(handler(*await asyncio.open_unix_connection(sock=ours)))
        stream = FrameStream(*await asyncio.open_unix_connection(sock=theirs),
                             kinds=loop.FROM_LOOPD)  # sends anything: a test peer
        try:
            return await client(stream)
        finally:
            await stream.close()
            await asyncio.wait_for(server, 10)

    return asyncio.run(run())


async def ask(stream: FrameStream, request: Frame = TURN) -> list[Frame]:
    """Send ``request``; every frame up to the final one, and then the clean close."""
    await stream.write(request)
    frames = [await stream.read(10)]
    while not frames[-1].final:
        frames.append(await stream.read(10))
    with pytest.raises(StreamClosed):
        await stream.read(10)
    return frames


def error_of(frames: list[Frame]) -> WireError:
    (frame,) = frames
    assert (frame.kind, frame.final) == ("error", True)
    return frame.parse(WireError)


def logged(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOG.name and r.levelno == level]


def test_an_answer_goes_out_after_the_frames_sent_on_the_way(caplog):
    async def answer(request: Frame, conn: Connection) -> Frame:
        assert request.parse(loop.Turn).content == "hi"
        assert conn.peer().uid >= 0  # the kernel's word for who is connected
        await conn.send(EVENT)
        return DONE

    with caplog.at_level(logging.INFO):
        assert exchange(answer, ask) == [EVENT, DONE]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_peers_bad_frame_is_answered_bad_frame_and_logged_as_theirs(caplog):
    async def answer(request: Frame, _conn: Connection) -> Frame:
        request.parse(loop.Turn)  # a FrameError naming the frame and the field
        return DONE

    bad = Frame(kind=loop.TURN, final=False, body={"session": "s1"})
    with caplog.at_level(logging.INFO):
        error = error_of(exchange(answer, lambda s: ask(s, bad)))
    assert error.code is ErrorCode.BAD_FRAME
    assert error.message.startswith("frame 'turn': content: ")
    (theirs,) = logged(caplog, logging.WARNING)
    assert "the peer's fault" in theirs.getMessage() and theirs.exc_info is None
    assert not logged(caplog, logging.ERROR)


def test_a_request_that_cannot_be_read_is_reported_then_answered(caplog):
    heard: list[RemoteProtocolError] = []

    async def answer(_request: Frame, _conn: Connection) -> Frame:
        raise AssertionError("the answerer never sees a frame that could not be read")

    async def unreadable(exc: RemoteProtocolError) -> None:
        heard.append(exc)

    wrong_kind = Frame(kind="turn_done", final=True, body={})  # not a kind loop.sock takes
    error = error_of(exchange(answer, lambda s: ask(s, wrong_kind), unreadable))
    assert error.code is ErrorCode.BAD_FRAME and [str(e) for e in heard] == [error.message]


@pytest.mark.parametrize("code", [ErrorCode.SESSION_BUSY, ErrorCode.DENIED])
def test_a_refused_request_is_answered_with_its_code_and_logged_as_theirs(caplog, code):
    async def answer(_request: Frame, _conn: Connection) -> Frame:
        raise Refused("session s1 is running a turn", code)

    with caplog.at_level(logging.INFO):
        error = error_of(exchange(answer, ask))
    assert (error.code, error.message) == (code, "session s1 is running a turn")
    assert len(logged(caplog, logging.WARNING)) == 1 and not logged(caplog, logging.ERROR)


def test_our_bug_is_answered_internal_and_logged_as_ours_with_its_traceback(caplog):
    async def answer(_request: Frame, _conn: Connection) -> Frame:
        raise KeyError("/home/owner/secret-path")

    with caplog.at_level(logging.INFO):
        error = error_of(exchange(answer, ask))
    assert error.code is ErrorCode.INTERNAL
    assert "secret-path" not in error.message  # the details are for our log, not the peer
    (ours,) = logged(caplog, logging.ERROR)
    assert "our bug, not the peer's" in ours.getMessage() and ours.exc_info is not None
    assert not logged(caplog, logging.WARNING)


def test_an_answer_this_side_may_not_send_is_our_bug_answered_internal(caplog):
    async def answer(_request: Frame, _conn: Connection) -> Frame:
        return Frame(kind=loop.TURN_DONE, final=True, body={"content": 7})  # fails its model

    with caplog.at_level(logging.INFO):
        error = error_of(exchange(answer, ask))
    assert error.code is ErrorCode.INTERNAL
    (ours,) = logged(caplog, logging.ERROR)
    assert "our bug, not the peer's: frame 'turn_done' we were sending" in ours.getMessage()


def test_an_answer_after_a_final_frame_the_answerer_sent_is_our_bug_and_nothing_follows(
        caplog):
    async def answer(_request: Frame, conn: Connection) -> Frame:
        await conn.send(DONE)  # a bug: the final frame sent on the way
        return DONE

    with caplog.at_level(logging.INFO):
        assert exchange(answer, ask) == [DONE]  # then the clean close: no error frame after it
    (ours,) = logged(caplog, logging.ERROR)
    assert "after our final frame" in ours.getMessage()


def test_a_peer_that_closes_before_its_request_gets_nothing_and_no_blame(caplog):
    called: list[Frame] = []

    async def answer(request: Frame, _conn: Connection) -> Frame:
        called.append(request)
        return DONE

    async def leave(_stream: FrameStream) -> list[Frame]:
        return []  # closes at once

    with caplog.at_level(logging.INFO):
        assert exchange(answer, leave) == []
    assert called == []
    assert [r.levelno for r in caplog.records if r.name == LOG.name] == [logging.INFO]


def test_a_peer_that_closes_while_its_answer_is_made_is_not_blamed(caplog):
    left = asyncio.Event()

    async def answer(_request: Frame, conn: Connection) -> Frame:
        with pytest.raises(StreamClosed):
            await conn.read(10)  # the peer's close, as gatewayd waits for it
        left.set()
        return DONE

    async def ask_and_leave(stream: FrameStream) -> list[Frame]:
        await stream.write(TURN)
        return []

    with caplog.at_level(logging.INFO):
        assert exchange(answer, ask_and_leave) == []
    assert left.is_set()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
