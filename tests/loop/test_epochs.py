"""Compaction as an epoch change, and identity per epoch, through Sessions.run with a scripted
model and a scripted memory (memoryd itself is in test_memory_link.py and the real-server test).

Rules checked: a turn that leaves the slot at or above the limit makes the next turn compact
first; the old log ends user (the instruction), assistant (the summary), usage, epoch_end and is
kept; the new epoch opens with the baseline as it is now plus the summary, on the same slot;
compaction that fails appends nothing, and a model that writes no summary closes the epoch with
a fixed notice; memoryd unreachable refuses the turn (``unavailable``) at
session start and at epoch start, and the next turn finishes the change without a second summary;
the identity is frozen for the epoch; finished turns are reported with their first line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from bxcore.config.inference import SlotSection
from bxcore.protocol.loop import Content, Progress, Turn
from bxcore.records import EpochEnd, SessionStart, User, parse_record
from loopd.baseline import SUMMARY_HEADING, Baseline, Identity, IdentityPart
from loopd.epochs import COMPACT_INSTRUCTION, Baselines, EpochSettings
from loopd.errors import CorruptSession, EpochClosed, MemoryUnavailable
from loopd.inference.errors import Unavailable
from loopd.log import encode_record
from loopd.sessions import Sessions
from loopd.store import SessionStore

from .support import (
    FIXED_TIME,
    Events,
    Reply,
    ScriptedInference,
    call,
    fake_registry,
    final_frame,
    make_loop,
    say,
)

pytestmark = pytest.mark.anyio


@dataclass
class ScriptedMemory:
    """Identity text per call, or MemoryUnavailable while ``down``; remembers every report."""

    text: str = "## soul.md\nCalm."
    down: bool = False
    asked: list[tuple[str, int]] = field(default_factory=list)
    reports: list[tuple[str, int, int, list[str]]] = field(default_factory=list)

    async def identity(self, session: str, epoch: int) -> Identity:
        if self.down:
            raise MemoryUnavailable("memoryd: not running")
        self.asked.append((session, epoch))
        return Identity((IdentityPart(name="soul.md", text=self.text),))

    def turn_finished(self, session, epoch, first_line, records) -> None:
        self.reports.append((session, epoch, first_line, [r.type for r in records]))

    async def aclose(self) -> None:
        return None


def make_server(tmp_path, inference, memory, limit=None) -> Sessions:
    system = tmp_path / "system.md"
    system.write_text("Be brief.")
    baselines = Baselines(system=system, tools=fake_registry().core_schemas(), memory=memory)
    return Sessions(
        store=SessionStore(tmp_path), loop=make_loop(inference), new_baseline=baselines,
        slots=SlotSection(main=0, background=1), memory=memory,
        epochs=EpochSettings(compact_at_tokens=limit, summary_tokens=99),
    )


def turn(content: str, resume: bool = True) -> Turn:
    return Turn(session="s1", content=content, resume=resume)


def types(session) -> list[str]:
    return [r.type for r in session.records]


async def test_a_full_slot_compacts_before_the_next_turn_into_a_new_epoch(tmp_path):
    memory = ScriptedMemory()
    # Scripted timings: each completion leaves cache_n + 10 + 5 tokens in the slot.
    inference = ScriptedInference([say("One."), say("Two."), say("We said one and two."),
                                   say("Three.")])
    server = make_server(tmp_path, inference, memory, limit=30)
    await server.run(turn("1", resume=False), Events())  # 15
    await server.run(turn("2"), Events())  # 30: at the limit
    memory.text = "## soul.md\nCalm.\n\n## memory.md\nThe CI runs on Fridays."
    done = await server.run(turn("3"), Events())
    assert done.content == "Three."

    old = SessionStore(tmp_path).open  # the closed epoch, read from its own files:
    directory = tmp_path / "sessions" / "s1"
    summary_request = inference.requests[2]
    assert summary_request.messages[-1].content == COMPACT_INSTRUCTION
    # The whole epoch so far (up to turn 2's answer), then the instruction: a strict extension.
    assert summary_request.messages[:4] == inference.requests[1].messages
    assert summary_request.tool_choice == "none" and summary_request.max_tokens == 99
    # Asked without reasoning, whatever the turn asked: a reasoning model would spend the
    # summary's cap thinking and return no summary (the third attack on issue 32).
    assert inference.requests[1].thinking and not summary_request.thinking
    assert summary_request.tools == inference.requests[1].tools
    closed = (directory / "0.jsonl").read_bytes().splitlines()
    assert [line.split(b'"type":"')[1].split(b'"')[0] for line in closed][-4:] == [
        b"user", b"assistant", b"usage", b"epoch_end"]

    current = old("s1")
    assert current.epoch == 1 and current.slot == 0
    assert types(current) == ["session_start", "user", "assistant", "usage"]
    assert current.baseline.summary == "We said one and two."
    assert "Fridays" in current.baseline.system  # the identity as it is now
    assert "Fridays" not in Baseline.load(directory / "0.baseline.json").system
    first = inference.requests[3]
    assert [m.role for m in first.messages] == ["system", "user", "user"]
    assert first.messages[1].content == f"{SUMMARY_HEADING}\n\nWe said one and two."
    assert first.slot == 0 and first.tools == summary_request.tools
    assert memory.asked == [("s1", 0), ("s1", 1)]


async def test_below_the_limit_nothing_is_compacted(tmp_path):
    inference = ScriptedInference([say("One."), say("Two.")])
    server = make_server(tmp_path, inference, ScriptedMemory(), limit=31)
    await server.run(turn("1", resume=False), Events())
    await server.run(turn("2"), Events())
    assert SessionStore(tmp_path).open("s1").epoch == 0
    assert all(r.messages[-1].content != COMPACT_INSTRUCTION for r in inference.requests)


async def test_a_failed_compaction_appends_nothing_and_the_turn_runs_in_the_old_epoch(tmp_path):
    inference = ScriptedInference([say("One."), Unavailable("the server is loading"), say("Two.")])
    server = make_server(tmp_path, inference, ScriptedMemory(), limit=10)
    await server.run(turn("1", resume=False), Events())
    done = await server.run(turn("2"), Events())
    assert done.content == "Two."
    session = SessionStore(tmp_path).open("s1")
    assert session.epoch == 0
    assert types(session) == ["session_start", "user", "assistant", "usage", "user",
                              "assistant", "usage"]
    assert [r.content for r in session.records if isinstance(r, User)] == ["1", "2"]


@pytest.mark.parametrize("no_summary", [
    say("  "), say("\u200b\u2060\ufeff\n\u202e"),
    Reply(reasoning="Let me think about what to keep."),
    call(("clock", "{}")), call(("fs.read", "{"), content=""),
], ids=["blank", "invisible", "only-reasoning", "a-tool-call", "a-cut-call"])
async def test_a_model_that_writes_no_summary_still_closes_the_epoch_with_a_notice(
    tmp_path, no_summary
):
    """Whatever the model answers the compaction request with, the epoch closes: a full slot
    is never ``session_full`` for good. The next opens with a fixed notice and the owner's
    last messages; the closed log keeps what the model emitted."""
    long = "x" * 2000
    inference = ScriptedInference([say("One."), say("Two."), say("Three."), say("Four."),
                                   no_summary, say("Five.")])
    server = make_server(tmp_path, inference, ScriptedMemory(), limit=55)
    for content in ("alpha", "beta", "gamma", long):
        await server.run(turn(content, resume=content != "alpha"), Events())
    done = await server.run(turn("delta"), Events())
    assert done.content == "Five."

    current = SessionStore(tmp_path).open("s1")
    assert current.epoch == 1
    notice = current.baseline.summary
    assert notice.startswith("[compaction] The model wrote ")
    assert "alpha" not in notice  # the last three of the owner's messages, the long one cut
    assert "- beta\n- gamma\n" in notice
    assert notice.endswith(f"{'x' * 500}[… cut: 2,000 characters]")
    assert inference.requests[5].messages[1].content == f"{SUMMARY_HEADING}\n\n{notice}"
    closed = (tmp_path / "sessions" / "s1" / "0.jsonl").read_bytes().splitlines()
    assert [parse_record(line).type for line in closed][-4:] == [
        "user", "assistant", "usage", "epoch_end"]
    assert parse_record(closed[-1]).summary == notice


async def test_memoryd_unreachable_at_session_start_refuses_the_turn_and_writes_nothing(
    tmp_path
):
    server = make_server(tmp_path, ScriptedInference([]), ScriptedMemory(down=True))
    refused = await final_frame(server.run(turn("1", resume=False), Events()))
    assert refused.body["code"] == "unavailable"
    assert "memoryd" in refused.body["message"]
    assert not SessionStore(tmp_path).exists("s1")


async def test_memoryd_unreachable_at_epoch_start_leaves_the_epoch_closed_until_it_is_back(
    tmp_path
):
    memory = ScriptedMemory()
    inference = ScriptedInference([say("One."), say("Summary."), say("Two.")])
    server = make_server(tmp_path, inference, memory, limit=10)
    await server.run(turn("1", resume=False), Events())
    memory.down = True
    refused = await final_frame(server.run(turn("2"), Events()))
    assert refused.body["code"] == "unavailable"
    closed = SessionStore(tmp_path).open("s1")
    assert closed.epoch == 0 and closed.closed and types(closed)[-1] == "epoch_end"
    with pytest.raises(EpochClosed):
        closed.append(User(time=FIXED_TIME, content="late"))

    memory.down = False
    # A crash between the new epoch's two files leaves a baseline file no log claims:
    (tmp_path / "sessions" / "s1" / "1.baseline.json").write_text("half written")
    restarted = make_server(tmp_path, inference, memory, limit=10)  # a loopd restart, too
    done = await restarted.run(turn("2"), Events())
    assert done.content == "Two."
    assert len(inference.requests) == 3  # no second summary was asked for
    current = SessionStore(tmp_path).open("s1")
    assert current.epoch == 1 and current.baseline.summary == "Summary."


async def test_the_identity_is_frozen_for_the_epoch(tmp_path):
    memory = ScriptedMemory(text="before")
    inference = ScriptedInference([say("One."), say("Two.")])
    server = make_server(tmp_path, inference, memory)
    await server.run(turn("1", resume=False), Events())
    memory.text = "after"
    await server.run(turn("2"), Events())
    assert inference.requests[0].messages[0] == inference.requests[1].messages[0]
    assert inference.requests[1].messages[0].content.endswith("before")
    assert memory.asked == [("s1", 0)]


async def test_the_summary_shows_its_progress_to_the_channel_but_not_its_text(tmp_path):
    progress = (Progress(total=40, cache=30, processed=40), Content(text="Summary."))
    inference = ScriptedInference([say("One."), say("Summary.", events=progress), say("Two.")])
    server = make_server(tmp_path, inference, ScriptedMemory(), limit=10)
    await server.run(turn("1", resume=False), Events())
    events = Events()
    await server.run(turn("2"), events)
    assert events.types() == ["progress"]


async def test_every_finished_turn_and_compaction_is_reported_with_its_first_line(tmp_path):
    memory = ScriptedMemory()
    inference = ScriptedInference([say("One."), say("Summary."), say("Two."),
                                   Unavailable("gone")])
    server = make_server(tmp_path, inference, memory, limit=10)
    await server.run(turn("1", resume=False), Events())
    await server.run(turn("2"), Events())
    server.epochs = EpochSettings()  # no more compaction: the next turn fails in epoch 1
    assert (await final_frame(server.run(turn("3"), Events()))).body["code"] == "unavailable"
    assert memory.reports == [
        ("s1", 0, 2, ["user", "assistant", "usage"]),
        ("s1", 0, 5, ["user", "assistant", "usage", "epoch_end"]),
        ("s1", 1, 2, ["user", "assistant", "usage"]),
        ("s1", 1, 5, ["user"]),  # a turn the model server ended still reports its records
    ]


def test_an_epoch_end_must_be_the_last_line_and_name_the_next_epoch(tmp_path):
    directory = tmp_path / "sessions" / "s1"
    directory.mkdir(parents=True)
    baseline = Baseline(system="S", tools=[])
    (directory / "0.baseline.json").write_bytes(baseline.to_json())
    start = SessionStart(time=FIXED_TIME, session="s1", epoch=0, slot=0, baseline=baseline.hash())
    end = EpochEnd(time=FIXED_TIME, next_epoch=1)
    log = directory / "0.jsonl"
    log.write_bytes(encode_record(start) + encode_record(end)
                    + encode_record(User(time=FIXED_TIME, content="x")))
    with pytest.raises(CorruptSession, match="line 2: epoch_end is not the last line"):
        SessionStore(tmp_path).open("s1")
    log.write_bytes(encode_record(start) + encode_record(EpochEnd(time=FIXED_TIME, next_epoch=2)))
    with pytest.raises(CorruptSession, match="line 2: epoch_end names epoch 2, not 1"):
        SessionStore(tmp_path).open("s1")
