"""A turn's origin is its idempotency key: a channel that resends a turn (gatewayd after a crash
between the ``turn`` frame and marking the post delivered) gets the first turn's answer, and the
session's log holds the message once. Served on a real Unix socket, like test_channel."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from bxcore.config.inference import InferenceSection
from bxcore.errors import ErrorCode
from bxcore.frames import Frame
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn
from bxcore.records import User
from loopd.errors import AlreadyTaken, TurnEnded
from loopd.inference.request import request_body
from loopd.replay import messages
from loopd.store import SessionStore
from pydantic import ValidationError

from .support import Events, ScriptedInference, call, say
from .test_channel import Gate, error_code, exchange, make_server, serving

pytestmark = pytest.mark.anyio

POST = "mattermost:kaz6nq78m9ed9h382r1c3b0hd6"


def turn(content: str = "hi", *, resume: bool = False, origin: str | None = POST) -> Turn:
    return Turn(session="s1", content=content, resume=resume, origin=origin)


def user_records(home) -> list[User]:
    session = SessionStore(home).open("s1")
    return [r for r in session.records if isinstance(r, User)]


async def test_a_resent_turn_is_answered_with_the_first_answer_and_logged_once(tmp_path):
    inference = ScriptedInference([call(("clock", "{}")), say("It is noon.")])
    async with serving(tmp_path, make_server(tmp_path, inference)) as path:
        first = await exchange(path, turn("what time is it?"))
        again = await exchange(path, turn("what time is it?", resume=True))
    assert first[-1].kind == again[-1].kind == "turn_done"
    assert again == [first[-1]]  # no events, the same content and usage: nothing ran
    assert again[-1].parse(wire.TurnDone).content == "It is noon."
    assert len(inference.requests) == 2  # the first turn's two completions, no third
    assert [(u.content, u.origin) for u in user_records(tmp_path)] == [
        ("what time is it?", POST)]


async def test_a_resend_while_the_first_turn_runs_is_session_busy_then_its_answer(tmp_path):
    gate = Gate(ScriptedInference([say("slow answer")]))
    async with serving(tmp_path, make_server(tmp_path, gate)) as path:
        first = asyncio.create_task(exchange(path, turn()))
        await gate.entered.wait()
        assert error_code(await exchange(path, turn(resume=True))) == "session_busy"
        gate.open.set()
        assert (await first)[-1].parse(wire.TurnDone).content == "slow answer"
        again = await exchange(path, turn(resume=True))
    assert again[-1].parse(wire.TurnDone).content == "slow answer"
    assert len(user_records(tmp_path)) == 1


async def test_a_new_origin_runs_and_no_origin_runs_every_time(tmp_path):
    inference = ScriptedInference([say("a"), say("b"), say("c"), say("d")])
    server = make_server(tmp_path, inference)
    assert (await server.run(turn("one"), Events())).content == "a"
    other = "mattermost:0000000000000000000000000b"
    assert (await server.run(turn("two", resume=True, origin=other), Events())).content == "b"
    for expected in ("c", "d"):  # bxctl chat: no origin, no deduplication
        done = await server.run(turn("three", resume=True, origin=None), Events())
        assert done.content == expected
    assert [(u.content, u.origin) for u in user_records(tmp_path)] == [
        ("one", POST), ("two", other), ("three", None), ("three", None)]


async def test_a_taken_turn_that_ended_without_an_answer_is_not_run_twice(tmp_path):
    server = make_server(tmp_path, ScriptedInference([call(("clock", '{"a":1}'))] * 2),
                         tool_iterations=1)  # the second: asked without tools, it calls again
    with pytest.raises(TurnEnded) as ended:
        await server.run(turn(), Events())
    assert ended.value.code is ErrorCode.TURN_LIMIT
    taken = re.escape(f"the turn from {POST} was already taken (log line 2)")
    with pytest.raises(AlreadyTaken, match=taken) as again:
        await server.run(turn(resume=True), Events())
    assert again.value.code is ErrorCode.BAD_REQUEST
    assert len(user_records(tmp_path)) == 1


async def test_the_origin_is_logged_but_never_reaches_the_prompt(tmp_path):
    inference = ScriptedInference([say("a"), say("b")])
    server = make_server(tmp_path, inference)
    await server.run(turn("same words", origin=None), Events())
    await server.run(turn("same words", resume=True), Events())
    log = (tmp_path / "sessions" / "s1" / "0.jsonl").read_bytes().splitlines()
    assert b'"origin"' not in log[1] and f'"origin":"{POST}"'.encode() in log[-3]
    session = SessionStore(tmp_path).open("s1")
    with_origin = [r.model_copy(update={"origin": None}) if isinstance(r, User) else r
                   for r in session.records]
    assert messages(session.baseline, session.records) == messages(session.baseline,
                                                                   with_origin)
    sent = json.dumps(request_body(inference.requests[-1], InferenceSection(model="m")))
    assert POST not in sent and sent.count('"same words"') == 2


@pytest.mark.parametrize("origin", [
    "", "mattermost:", ":abc", "Mattermost:abc", "mattermost:a b", "mattermost:a/b",
    "mattermost:" + "x" * 96, "m" * 33 + ":x",
])
def test_an_origin_that_is_not_a_bounded_safe_id_is_refused(origin):
    with pytest.raises(ValidationError, match="an origin is '<channel>:<id>'"):
        Turn(session="s1", content="x", resume=False, origin=origin)


async def test_a_bad_origin_on_the_wire_is_answered_bad_frame(tmp_path):
    frame = Frame(kind="turn", final=False,
                  body={"session": "s1", "content": "x", "resume": False, "origin": "../x"})
    async with serving(tmp_path, make_server(tmp_path, ScriptedInference([]))) as path:
        assert error_code(await exchange(path, frame)) == "bad_frame"
