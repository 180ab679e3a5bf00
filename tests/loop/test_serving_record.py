"""Serving settings (docs/design.md): read from /props, /slots and the router's /models,
recorded when a session (or epoch) begins, and each change since named by ``loopd serving``
(which ``bxctl doctor`` runs) and at ``loopd serve``'s start. The per-slot context the server
reports drives compaction when the config does not record one."""

from __future__ import annotations

import asyncio

import pytest
from bxcore.config import parse_config
from bxcore.protocol.loop import Turn
from bxcore.util import sha256
from loopd.checks import serving_since_report
from loopd.epochs import COMPACT_INSTRUCTION, EpochSettings
from loopd.inference.errors import BadStream, Unavailable
from loopd.inference.serving import ServingSettings, changes, settings_from
from loopd.sessions import Sessions
from loopd.store import SERVING_RECORD, SessionStore
from loopd.wiring import build
from support.fake_tools import loop_section

from .support import Events, ScriptedInference, fixed_baselines, make_loop, run, say

pytestmark = pytest.mark.anyio

PROPS = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2,
         "chat_template": "{{ messages }}"}
SLOTS = [{"id": 0, "n_ctx": 4096, "speculative": False},
         {"id": 1, "n_ctx": 4096, "speculative": False}]
ROUTER_MODELS = {"data": [
    {"id": "smol", "aliases": [], "status": {"value": "loaded", "args": ["--ctx-size", "4096"]}},
    {"id": "ornith", "aliases": ["o"], "status": {"value": "loaded", "args": [
        "--model", "m.gguf", "--cache-type-k", "q8_0", "-ctv", "q8_0", "--parallel", "2"]}},
]}
SERVED = settings_from(PROPS, SLOTS, ROUTER_MODELS, "ornith")


def test_the_settings_come_from_props_slots_and_the_routers_launch_arguments():
    assert ServingSettings(
        chat_template_sha256=sha256(b"{{ messages }}"), kv_cache_type="q8_0/q8_0",
        speculative=False, slot_count=2, per_slot_context=4096,
    ) == SERVED
    assert settings_from(PROPS, SLOTS, ROUTER_MODELS, "smol").kv_cache_type == "f16/f16"
    assert settings_from(PROPS, SLOTS, None, "ornith").kv_cache_type is None  # not a router
    speculating = [{**SLOTS[0], "speculative": True}, SLOTS[1]]
    assert settings_from(PROPS, speculating, None, "x").speculative is True


def test_answers_of_the_wrong_shape_are_refused_naming_the_endpoint():
    with pytest.raises(BadStream, match="/props"):
        settings_from({"total_slots": 2}, SLOTS, None, "x")
    with pytest.raises(BadStream, match="/slots"):
        settings_from(PROPS, {"slots": []}, None, "x")


def test_each_change_is_named_and_a_changed_template_loses_every_cached_prefix():
    now = SERVED.model_copy(update={
        "chat_template_sha256": "sha256:other", "kv_cache_type": "f16/f16",
        "speculative": True, "slot_count": 3, "per_slot_context": 8192,
    })
    found = changes(SERVED, now)
    assert len(found) == 5
    assert found[0].startswith("the chat template changed") and "every cached prefix is gone" \
        in found[0]
    assert "KV cache type changed (q8_0/q8_0 -> f16/f16)" in found[1]
    assert changes(SERVED, SERVED) == []


async def test_a_new_session_and_each_new_epoch_record_what_they_began_under(tmp_path):
    served = [SERVED]

    async def serving() -> ServingSettings:
        return served[-1]

    inference = ScriptedInference([say("One.", prompt_n=900), say("Summary."), say("Two.")])
    store = SessionStore(tmp_path)
    server = Sessions(store=store, loop=make_loop(inference), new_baseline=fixed_baselines,
                        slots=parse_config("", "c.toml").inference.slots, serving=serving,
                        epochs=EpochSettings(compact_at_tokens=100))
    await server.run(Turn(session="s1", content="hi", resume=False), Events())
    record = tmp_path / "sessions" / "s1" / SERVING_RECORD
    assert ServingSettings.model_validate_json(record.read_bytes()) == SERVED
    served.append(SERVED.model_copy(update={"chat_template_sha256": "sha256:new"}))
    await server.run(Turn(session="s1", content="again", resume=True), Events())
    assert store.open("s1").epoch == 1  # compacted, and the new epoch recorded afresh
    assert ServingSettings.model_validate_json(record.read_bytes()).chat_template_sha256 == \
        "sha256:new"


async def test_a_server_that_cannot_say_leaves_no_record_and_the_turn_runs(tmp_path):
    async def serving() -> ServingSettings:
        raise Unavailable("inferproxy: not running")

    server = Sessions(store=SessionStore(tmp_path), loop=make_loop(ScriptedInference(
        [say("Hi.")])), new_baseline=fixed_baselines,
        slots=parse_config("", "c.toml").inference.slots, serving=serving)
    await server.run(Turn(session="s1", content="hi", resume=False), Events())
    assert not (tmp_path / "sessions" / "s1" / SERVING_RECORD).exists()


def test_the_report_names_what_changed_since_the_latest_session_began(tmp_path):
    store = SessionStore(tmp_path)
    assert serving_since_report(SERVED, store).ok  # nothing recorded yet
    for name, settings in (("old", SERVED.model_copy(update={"slot_count": 4})),
                           ("new", SERVED)):
        directory = tmp_path / "sessions" / name
        directory.mkdir(parents=True)
        (directory / SERVING_RECORD).write_text(settings.model_dump_json())
    assert serving_since_report(SERVED, store).ok  # the latest session began under these
    changed = SERVED.model_copy(update={"chat_template_sha256": "sha256:other"})
    report = serving_since_report(changed, store)
    assert not report.ok
    assert report.text().startswith("FAIL serving_since_session: since session new began: "
                                    "the chat template changed")
    assert "every cached prefix is gone" in report.text()


async def test_compaction_uses_the_servers_per_slot_context_when_none_is_recorded(
    tmp_path, capsys
):
    """No [inference.serving] per_slot_context: the server's 4,096 tokens per slot put the
    compaction limit at 3,072 (compact_at 0.75), so a turn that fills 3,100 tokens compacts."""
    path = tmp_path / "config.toml"
    text = (f'[paths]\nhome = "{tmp_path}/home"\nrun = "{tmp_path}/run"\n'
            + loop_section(tmp_path))
    path.write_text(text)
    config = parse_config(text, path, tmp_path)
    inference = ScriptedInference([say("Long.", prompt_n=3100), say("Summary."), say("Short.")])

    async def serving() -> ServingSettings:
        return SERVED

    async def passing() -> tuple[bool, str]:
        return True, "ok"

    stop = asyncio.Event()
    serving_task = asyncio.create_task(run(build(config, path), inference, passing,
                                           stop=stop, serving=serving))
    try:
        from bxcore.frames import Frame
        from bxcore.framestream import FrameStream
        from bxcore.protocol import loop as wire

        for content, resume in (("first", False), ("second", True)):
            while not config.loop_socket.exists():
                await asyncio.sleep(0.01)
            stream = await FrameStream.connect(config.loop_socket, wire.FROM_LOOPD)
            await stream.write(Frame.of(wire.TURN, Turn(session="s1", content=content,
                                                        resume=resume), final=False))
            while not (frame := await stream.read(timeout=10)).final:
                pass
            await stream.close()
            assert frame.kind == "turn_done", frame.body
    finally:
        stop.set()
        assert await asyncio.wait_for(serving_task, 10) == 0
    assert inference.requests[1].messages[-1].content == COMPACT_INSTRUCTION
    # loopd serve's start names the serving settings beside the self-test's report
    assert "ok   serving_since_session: no session recorded yet" in capsys.readouterr().err
