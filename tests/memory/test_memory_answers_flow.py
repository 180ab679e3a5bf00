"""A memory tool answer depends only on what the session sent and on memory at or below its
label (docs/decisions/memory-ids-per-label.md; attack 31e, M2).

The property: two worlds that differ only in the memory calls of sessions above the asker
(sessions whose label, class and trust, is not at or below the asker's: how many calls, which
actions, which texts, where they fall among the lower calls) give the asker, and every session
at or below it, byte-identical answers to every call: notes (``Noted as note <id>``), identity
edits (applied or staged, refused, turned into notes), recall (``note:<id>`` origins, order).
Judged through memoryd's own request handling (``MemoryService.memory_call``) with a fixed
clock, and (a few examples) by ``memoryd serve`` over memory.sock, note times left out there.
Before per-label ids the note number counted every class's notes and the edit number every
write: both fail (``Noted as note 5`` against ``note 13`` in the attack's own case).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bxcore.tools import DataClass, ToolResponse
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryd.journal import Journal
from memoryd.layout import Layout
from memoryd.notes import read_notes
from memoryd.wiring import build
from support.scratch import scratch_dir

from .support import T, call, call_frame, config
from .test_recall_flow import LABELS, ask, at_or_below, serving

WORDS = ["heron", "kiwi", "mango", "tulip", "plan"]
words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
FILES = st.sampled_from(["memory.md", "user.md"])

# One memory call: the tool and its arguments.
action = st.one_of(
    st.builds(lambda t: ("memory", {"action": "note", "text": t}), words),
    st.builds(lambda f, t: ("memory", {"action": "add", "file": f, "text": t}), FILES, words),
    st.builds(lambda f, o, t: ("memory", {"action": "replace", "file": f, "old_text": o,
                                          "text": t}), FILES, st.sampled_from(WORDS), words),
    st.builds(lambda f, o: ("memory", {"action": "remove", "file": f, "old_text": o}),
              FILES, st.sampled_from(WORDS)),
    st.builds(lambda q, k: ("recall", {"query": q, "k": k}), words, st.integers(1, 8)),
)


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    asker = draw(st.sampled_from(LABELS))
    low = [label for label in LABELS if at_or_below(label, asker)]
    high = [label for label in LABELS if not at_or_below(label, asker)]
    # The lower calls: the asker's own and those of sessions at or below it (l0, l1...).
    sessions = {"asker": asker} | {f"l{i}": draw(st.sampled_from(low)) for i in range(3)}
    base = draw(st.lists(st.tuples(st.sampled_from(sorted(sessions)), action),
                         min_size=1, max_size=10))
    # The higher calls of each world, each put before the lower call of its position.
    def higher() -> list[tuple[int, str, tuple[DataClass, bool], Any]]:
        if not high:
            return []
        return draw(st.lists(st.tuples(st.integers(0, len(base)), st.sampled_from(["h0", "h1"]),
                                       st.sampled_from(high), action), max_size=10))
    return dict(asker=asker, sessions=sessions, base=base, first=higher(), second=higher(),
                staged=draw(st.booleans()))


def interleaved(world: dict[str, Any], which: str) -> list[tuple[bool, str, Any, Any]]:
    """(lower?, session, label, call) in the order the world makes them."""
    out = []
    for position in range(len(world["base"]) + 1):
        out += [(False, session, label, one) for at, session, label, one in world[which]
                if at == position]
        if position < len(world["base"]):
            session, one = world["base"][position]
            out.append((True, session, world["sessions"][session], one))
    return out


def fixed_clock() -> str:
    return T


async def run_world(home: Path, world: dict[str, Any], which: str) -> list[Any]:
    extra = "[memory]\nceiling = \"secret\"\n" + (
        "stage_identity_writes = true\n" if world["staged"] else "")
    service = build(config(home, extra))
    service.writer._clock = fixed_clock
    answers = []
    try:
        for lower, session, (data_class, untrusted), (tool, args) in interleaved(world, which):
            response = await call(service, tool, args, session=session,
                                  data_class=data_class.value, untrusted=untrusted)
            if lower:
                answers.append((session, tool, response.canonical()))
    finally:
        await service.aclose()
    return answers


@settings(max_examples=by_profile(short=30, long=1000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_what_sessions_above_the_asker_do_never_changes_its_memory_answers(world):
    # in memory (tests/support/scratch.py): the stores' fsyncs were most of an example
    with scratch_dir() as one, scratch_dir() as other:
        first = asyncio.run(run_world(one / "home", world, "first"))
        second = asyncio.run(run_world(other / "home", world, "second"))
    assert first == second


def test_attack_31e_m2_a_public_note_number_counts_no_secret_note(tmp_path):
    """The attack's case: a secret session writes 3 or 11 notes between two public ones."""
    said = []
    for count in (3, 11):
        async def one(home: Path = tmp_path / str(count) / "home", count: int = count) -> str:
            service = build(config(home))
            try:
                await call(service, "memory", {"action": "note", "text": "marker one"},
                           session="pub1")
                for i in range(count):
                    await call(service, "memory", {"action": "note", "text": f"pad {i}"},
                               session="sec", data_class="secret")
                response = await call(service, "memory", {"action": "note", "text": "marker two"},
                                      session="pub2")
                return f"{response.data_class.value} {response.content}"
            finally:
                await service.aclose()
        said.append(asyncio.run(one()))
    assert said == ["public Noted as note public-2 in notes.md."] * 2


def test_an_identity_edit_is_told_no_number_that_counts_other_writes(tmp_path):
    """The journal's sequence number counts every write (a secret note is one); the session's
    answer names none, and the owner still accepts and undoes by it."""
    from click.testing import CliRunner
    from memoryd.cli import main

    home = tmp_path / "home"
    service = build(config(home, "[memory]\nstage_identity_writes = true\n"))

    async def calls() -> list[ToolResponse]:
        await call(service, "memory", {"action": "note", "text": "secret pad"},
                   data_class="secret", session="sec")
        staged = await call(service, "memory", {"action": "add", "file": "memory.md",
                                                "text": "herons in spring"}, session="pub")
        return [staged]

    try:
        (staged,) = asyncio.run(calls())
    finally:
        asyncio.run(service.aclose())
    assert staged.content == ("Staged for the owner's review (memoryd staged lists it); if "
                              "accepted, the edit of memory.md takes effect at the next epoch.")
    (waiting,) = Journal(Layout(home).edits).staged()
    runner = CliRunner(env={"BOXMAKER_HOME": str(home)})
    assert runner.invoke(main, ["accept", str(waiting.seq)]).exit_code == 0
    assert (home / "memory" / "memory.md").read_text().strip() == "herons in spring"
    assert runner.invoke(main, ["undo", "memory.md"]).exit_code == 0
    assert (home / "memory" / "memory.md").read_text() == ""


# -- the same property against the real daemon ------------------------------------------------


def daemon_answers(path: Path, world: dict[str, Any], which: str) -> list[Any]:
    answers = []
    for lower, session, (data_class, untrusted), (tool, args) in interleaved(world, which):
        frame = call_frame(tool, args, session=session, data_class=data_class.value,
                           untrusted=untrusted)
        response = ask(path, frame).parse(ToolResponse)
        if not lower:
            continue
        content: Any = response.content
        if tool == "recall":  # a note's time is the daemon's clock when it was written
            content = [{**hit, "time": None} for hit in json.loads(content)["results"]]
        answers.append((session, tool, response.status, response.data_class,
                        response.untrusted, content))
    return answers


@settings(max_examples=by_profile(short=3, long=100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_the_serving_daemon_answers_alike_whatever_higher_sessions_wrote(
        tmp_path_factory, world):
    results = []
    for which in ("first", "second"):
        with serving(tmp_path_factory.mktemp("daemon")) as (path, _home):
            results.append(daemon_answers(path, world, which))
    assert results[0] == results[1]


# -- state from before per-label ids ------------------------------------------------------------

OLD_NOTES = (
    "# notes.md: append-only experience. Each header gives its entry's length.\n\n"
    "### note 1 time=2026-11-01T07:00:00.000000Z session=a class=public trust=trusted chars=12\n"
    "walnut first\n\n"
    "### note 2 time=2026-11-01T07:00:01.000000Z session=b class=secret trust=trusted chars=11\n"
    "walnut held\n\n"
    "### moved 3 time=2026-11-01T07:00:02.000000Z session=a class=public trust=trusted"
    " from=memory.md chars=10\nwalnut old\n\n"
)


def test_memory_written_before_per_label_ids_still_loads_and_grows(tmp_path):
    """An old notes.md (one counter over every class), old journal entries (numeric note ids)
    and an index that ingested notes by the highest id: all read as they are, a new note
    follows them with a per-label id, recall finds old and new, the owner's undo still works."""
    home = tmp_path / "home"
    memory = home / "memory"
    (memory / "edits").mkdir(parents=True)
    (memory / "notes.md").write_text(OLD_NOTES[: OLD_NOTES.index("### moved")])
    (memory / "memory.md").write_text("walnut new\n")
    old_edits = [
        {"seq": 1, "time": "2026-11-01T07:00:00.000000Z", "session": "a", "data_class": "public",
         "file": "notes.md", "action": "note", "summary": "walnut first", "notes": [1]},
        {"seq": 2, "time": "2026-11-01T07:00:01.000000Z", "session": "b", "data_class": "secret",
         "file": "notes.md", "action": "note", "summary": "walnut held", "notes": [2]},
        {"seq": 3, "time": "2026-11-01T07:00:02.000000Z", "session": "a", "data_class": "public",
         "file": "memory.md", "action": "consolidate",
         "summary": "consolidate: 0 kept, 1 rewritten, 1 moved, 0 dropped",
         "before": "walnut old\n", "after": "walnut new\n", "notes": [3]},
    ]
    for edit in old_edits:
        (memory / "edits" / f"{edit['seq']:08d}.json").write_text(json.dumps(edit) + "\n")
    # The index as the old code left it after notes 1 and 2 (``ingested`` = the highest id);
    # the old code's append of note 3 then lands.
    service = build(config(home, "[memory]\nceiling = \"secret\"\n"))
    assert service.catch_up() == 2
    asyncio.run(service.aclose())
    with (memory / "notes.md").open("a") as handle:
        handle.write(OLD_NOTES[OLD_NOTES.index("### moved"):])
    assert [n.id for n in read_notes(memory / "notes.md")] == ["1", "2", "3"]
    assert [e.notes for e in Journal(memory / "edits").entries()] == [["1"], ["2"], ["3"]]

    service = build(config(home, "[memory]\nceiling = \"secret\"\n"))

    async def calls() -> list[ToolResponse]:
        return [await call(service, "memory", {"action": "note", "text": "walnut later"}),
                await call(service, "memory", {"action": "note", "text": "walnut hidden"},
                           session="s2", data_class="secret"),
                await call(service, "recall", {"query": "walnut", "k": 10}),
                await call(service, "recall", {"query": "walnut", "k": 10}, data_class="secret")]

    try:
        noted, hidden, public, secret = asyncio.run(calls())
    finally:
        asyncio.run(service.aclose())
    assert noted.content == "Noted as note public-1 in notes.md."
    assert hidden.content == "Noted as note secret-1 in notes.md."
    origins = {hit["origin"] for hit in json.loads(public.content)["results"]}
    assert origins == {"note:1", "note:3", "note:public-1"}
    origins = {hit["origin"] for hit in json.loads(secret.content)["results"]}
    assert origins == {"note:1", "note:2", "note:3", "note:public-1", "note:secret-1"}
    from click.testing import CliRunner
    from memoryd.cli import main
    undone = CliRunner(env={"BOXMAKER_HOME": str(home)}).invoke(main, ["undo", "memory.md"])
    assert undone.exit_code == 0, undone.output
    assert (memory / "memory.md").read_text() == "walnut old\n"
