"""loop.sock: every frame kind and error code, events in order, session_busy at once, and the
lock released before the final frame. Served on a real Unix socket in a temp dir."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct

import pytest
from bxcore.config.inference import SlotSection
from bxcore.errors import ErrorCode
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Content, Progress, Turn
from loopd.errors import LoopError, SessionExists
from loopd.inference.errors import ServerStreamError, SessionFull
from loopd.sessions import Sessions
from loopd.sockets import handler
from loopd.store import SessionStore

from .support import Events, ScriptedInference, call, fixed_baselines, make_loop, say

pytestmark = pytest.mark.anyio


class Gate:
    """An inference step that waits until the test opens it."""

    def __init__(self, inner: ScriptedInference):
        self.inner = inner
        self.entered = asyncio.Event()
        self.open = asyncio.Event()

    async def chat(self, request, events):
        self.entered.set()
        await self.open.wait()
        return await self.inner.chat(request, events)


def make_server(home, inference, **settings) -> Sessions:
    return Sessions(
        store=SessionStore(home), loop=make_loop(inference, **settings),
        new_baseline=fixed_baselines, slots=SlotSection(main=0, background=1),
    )


@contextlib.asynccontextmanager
async def serving(tmp_path, server: Sessions):
    path = tmp_path / "loop.sock"
    listener = await asyncio.start_unix_server(handler(server), path=str(path))
    try:
        yield path
    finally:
        listener.close()
        await listener.wait_closed()


async def exchange(path, turn: Turn | Frame) -> list[Frame]:
    """Send one turn; read every frame up to the final one."""
    stream = await FrameStream.connect(path, wire.FROM_LOOPD)
    try:
        frame = turn if isinstance(turn, Frame) else Frame.of(wire.TURN, turn, final=False)
        await stream.write(frame)
        frames = [await stream.read(timeout=10)]
        while not frames[-1].final:
            frames.append(await stream.read(timeout=10))
        return frames
    finally:
        await stream.close()


def turn(content="hi", *, session="s1", resume=False, kind="main") -> Turn:
    return Turn(session=session, content=content, resume=resume, session_kind=kind)


def error_code(frames: list[Frame]) -> str:
    assert frames[-1].kind == wire.ERROR and frames[-1].final
    return frames[-1].body["code"]


async def test_a_turn_streams_its_events_in_order_then_turn_done(tmp_path):
    progress = (Progress(total=10, cache=0, processed=10), Content(text="Hel"),
                Content(text="lo."))
    inference = ScriptedInference([call(("clock", "{}")), say("Hello.", events=progress)])
    async with serving(tmp_path, make_server(tmp_path, inference)) as path:
        frames = await exchange(path, turn())
    assert [f.kind for f in frames] == ["turn_event"] * 5 + ["turn_done"]
    assert [f.final for f in frames] == [False] * 5 + [True]
    events = [f.parse(wire.TurnEvent).event for f in frames[:-1]]
    assert [e.type for e in events] == [
        "tool_call_started", "tool_result", "progress", "content", "content",
    ]
    done = frames[-1].parse(wire.TurnDone)
    assert done.content == "Hello."
    assert done.usage.prompt_n == 10



async def test_an_event_loopd_cannot_send_is_logged_as_its_bug_and_the_turn_runs_on(
        tmp_path, caplog):
    broken = Progress.model_construct(total=-1, cache=0, processed=0)  # a bug: never validated
    inference = ScriptedInference([say("Hello.", events=(broken, Content(text="Hello.")))])
    with caplog.at_level(logging.ERROR, logger="loopd"):
        async with serving(tmp_path, make_server(tmp_path, inference)) as path:
            frames = await exchange(path, turn())
    assert [f.kind for f in frames] == ["turn_event", "turn_done"]
    assert frames[0].parse(wire.TurnEvent).event == Content(text="Hello.")
    assert frames[-1].parse(wire.TurnDone).content == "Hello."
    assert "our bug, not the channel's: an event was not sent: frame 'turn_event' we were " \
        "sending: event.progress.total" in caplog.text

async def test_resume_rules_and_their_codes(tmp_path):
    inference = ScriptedInference([say("one"), say("two")])
    async with serving(tmp_path, make_server(tmp_path, inference)) as path:
        assert error_code(await exchange(path, turn(resume=True))) == "no_such_session"
        assert (await exchange(path, turn()))[-1].kind == "turn_done"
        assert error_code(await exchange(path, turn())) == "session_exists"
        assert (await exchange(path, turn(resume=True)))[-1].kind == "turn_done"


async def test_the_session_kind_picks_the_slot_for_good(tmp_path):
    inference = ScriptedInference([say("a"), say("b")])
    async with serving(tmp_path, make_server(tmp_path, inference)) as path:
        await exchange(path, turn(kind="background"))
        await exchange(path, turn(resume=True, kind="main"))
    assert [r.slot for r in inference.requests] == [1, 1]


@pytest.mark.parametrize(
    ("script", "code"),
    [([call(("clock", '{"a":1}'))] * 2, "turn_limit"),  # asked once more without tools, calls again
     ([SessionFull("full")], "session_full"),
     ([ServerStreamError("boom")], "inference")],
)
async def test_a_stopped_turn_answers_its_error_code(tmp_path, script, code):
    server = make_server(tmp_path, ScriptedInference(script), tool_iterations=1)
    async with serving(tmp_path, server) as path:
        assert error_code(await exchange(path, turn())) == code


@pytest.mark.parametrize(
    "frame",
    [Frame(kind="turn", final=False, body={"session": "s1", "content": "x"}),
     Frame(kind="turn", final=False, body={"session": "../x", "content": "x", "resume": False}),
     Frame(kind="turn_done", final=True, body={})],
)
async def test_a_bad_turn_frame_is_answered_bad_frame(tmp_path, frame):
    async with serving(tmp_path, make_server(tmp_path, ScriptedInference([]))) as path:
        assert error_code(await exchange(path, frame)) == "bad_frame"


async def test_garbage_bytes_are_answered_bad_frame(tmp_path):
    async with serving(tmp_path, make_server(tmp_path, ScriptedInference([]))) as path:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(struct.pack(">I", 5) + b"nope!")
        await writer.drain()
        stream = FrameStream(reader, writer, wire.FROM_LOOPD)
        frame = await stream.read(timeout=10)
        await stream.close()
    assert frame.kind == "error" and frame.body["code"] == ErrorCode.BAD_FRAME


async def test_a_busy_session_is_refused_at_once_while_others_run(tmp_path):
    gate = Gate(ScriptedInference([say("slow"), say("other")]))
    async with serving(tmp_path, make_server(tmp_path, gate)) as path:
        first = asyncio.create_task(exchange(path, turn()))
        await gate.entered.wait()
        busy = await exchange(path, turn(resume=True))
        assert error_code(busy) == "session_busy"
        other = asyncio.create_task(exchange(path, turn(session="s2")))
        gate.open.set()
        assert (await first)[-1].parse(wire.TurnDone).content == "slow"
        assert (await other)[-1].kind == "turn_done"


async def test_the_lock_is_released_before_the_final_frame(tmp_path):
    """run() gives back the answer, or raises, with the session already free, so a channel
    that sends its next turn on reading the final frame is never refused."""
    server = make_server(tmp_path, ScriptedInference([say("a"), SessionFull("x"), say("c")]))
    await server.run(turn(), Events())
    with pytest.raises(LoopError) as ended:
        await server.run(turn(resume=True), Events())
    assert ended.value.code is ErrorCode.SESSION_FULL
    await server.run(turn(resume=True), Events())
    with pytest.raises(SessionExists):
        await server.run(turn(), Events())
    # A failure nobody foresaw (here: the script ran out) leaves the session free too: the
    # next turn fails the same way, not as session_busy.
    for _ in range(2):
        with pytest.raises(AssertionError, match="more completions than the script has"):
            await server.run(turn(resume=True), Events())


async def test_a_kept_session_is_reread_when_its_log_changed(tmp_path):
    inference = ScriptedInference([say("a"), say("b")])
    server = make_server(tmp_path, inference)
    await server.run(turn(), Events())
    log = tmp_path / "sessions" / "s1" / "0.jsonl"
    log.write_bytes(log.read_bytes() + b'{"content":"added","time":"2026-09-18T12:00:00Z",'
                    b'"type":"user"}\n')
    await server.run(turn("next", resume=True), Events())
    assert [m.content for m in inference.requests[-1].messages][-2:] == ["added", "next"]


async def test_a_channel_that_leaves_mid_turn_does_not_cut_the_turn(tmp_path):
    gate = Gate(ScriptedInference([say("finished", events=(Content(text="x"),))]))
    async with serving(tmp_path, make_server(tmp_path, gate)) as path:
        stream = await FrameStream.connect(path, wire.FROM_LOOPD)
        await stream.write(Frame.of(wire.TURN, turn(), final=False))
        await gate.entered.wait()
        await stream.close()
        gate.open.set()
        for _ in range(100):
            if (tmp_path / "sessions" / "s1" / "0.jsonl").read_text().count("\n") == 4:
                break
            await asyncio.sleep(0.02)
    types = SessionStore(tmp_path).open("s1").records
    assert [r.type for r in types] == ["session_start", "user", "assistant", "usage"]


async def test_a_turn_without_thinking_asks_every_completion_not_to_think(tmp_path):
    inference = ScriptedInference([call(("clock", "{}")), say("Noon."), say("Later.")])
    server = make_server(tmp_path, inference)
    await server.run(turn().model_copy(update={"thinking": False}), Events())
    assert [r.thinking for r in inference.requests] == [False, False]
    await server.run(turn(resume=True), Events())
    assert inference.requests[-1].thinking is True  # the switch holds for its own turn only
