"""A memory write survives a crash at any step (memoryd/intent.py).

For every durable step of every kind of write (the intent, the identity file, the notes.md
append, whole or torn, the journal entry, the intent's removal) a crash is injected by raising
from the step's function; a restarted writer then recovers. Whatever the step, the three files
hold exactly what they held before the write or exactly what a write without a crash leaves, and
which of the two is decided by the commit point (the identity file's rename, a note's append).
faults/test_memory_write_sigkill.py does the same with a real SIGKILL of a child process.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from bxcore.memory_tool import split_entries
from hypothesis import given
from hypothesis import strategies as st
from memoryd.errors import CommandRefused, StoreError, WriteRefused
from memoryd.layout import Layout, read_text
from support.scratch import scratch_dir

from .crashpoints import (
    ARGS,
    CALLER,
    OPS,
    Crash,
    CrashPoints,
    assert_journal_agrees,
    raise_crash,
    setup,
    state,
    takes_effect,
    writer,
)


def reference(home: Path, op: str) -> tuple[tuple[object, ...], tuple[object, ...], int]:
    """The state before and after ``op`` without a crash, and how many durable steps it took."""
    setup(home)
    before = state(home)
    w = writer(home)
    with pytest.MonkeyPatch.context() as patch:
        points = CrashPoints(None, raise_crash).install(patch.setattr)
        OPS[op](w)
    return before, state(home), len(points.steps)


def crash_then_restart(home: Path, op: str, at: int, torn: bool) -> CrashPoints:
    setup(home)
    w = writer(home)
    with pytest.MonkeyPatch.context() as patch:
        points = CrashPoints(at, raise_crash, torn=torn).install(patch.setattr)
        with pytest.raises(Crash):
            OPS[op](w)
    writer(home)  # the restart
    return points


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_crash_at_any_step_leaves_the_state_before_or_after_and_the_journal_agreeing(
    tmp_path, op
):
    before, after, steps = reference(tmp_path / "reference", op)
    assert before != after
    assert steps == (5 if op != "note" else 4)  # intent, [identity file], notes, entry, discard
    for at in range(steps):
        for torn in (False, True):
            home = tmp_path / f"{at}-{torn}"
            points = crash_then_restart(home, op, at, torn)
            expected = after if takes_effect(at, points.fired, torn) else before
            assert state(home) == expected, (op, at, points.fired, torn)
            assert_journal_agrees(home)
            writer(home).write(ARGS.validate_python({"action": "note", "text": "next"}), CALLER)
            assert_journal_agrees(home)


def test_an_applied_edit_that_lost_its_entry_is_undone_like_any_other(tmp_path):
    home = tmp_path / "home"
    crash_then_restart(home, "consolidate", 3, torn=False)  # crashed before the journal entry
    w = writer(home)
    target = w.journal.undo_target("memory.md")
    assert target is not None and target.action == "consolidate"
    w.undo("memory.md")
    assert read_text(home / "memory" / "memory.md") == target.before
    assert_journal_agrees(home)


def test_notes_changed_by_hand_after_a_crash_are_refused_naming_the_file(tmp_path):
    home = tmp_path / "home"
    setup(home)
    w = writer(home)
    with pytest.MonkeyPatch.context() as patch:
        CrashPoints(2, raise_crash, torn=True).install(patch.setattr)
        with pytest.raises(Crash):
            OPS["consolidate"](w)
    with (home / "memory" / "notes.md").open("a") as handle:
        handle.write("the owner typed this\n")
    with pytest.raises(StoreError, match=r"notes\.md.*00000005\.intent"):
        writer(home)


# An entry exactly as memoryd wrote it before intents existed: the journal format is unchanged.
OLD_ENTRY = (
    '{"action":"add","after":"CI runs on Fridays.\\n","before":"","data_class":"private",'
    '"file":"memory.md","notes":[],"pending_notes":[],"seq":1,"session":"s1","staged":false,'
    '"summary":"add: CI runs on Fridays.","target":null,"time":"2026-11-30T07:00:00.000000Z"}\n'
)


def test_a_journal_written_before_intents_existed_still_reads_and_undoes(tmp_path):
    home = tmp_path / "home"
    layout = Layout(home)
    layout.ensure()
    (layout.edits / "00000001.json").write_text(OLD_ENTRY)
    (layout.memory / "memory.md").write_text("CI runs on Fridays.\n")
    w = writer(home)
    assert [(e.seq, e.action) for e in w.journal.entries()] == [(1, "add")]
    w.undo("memory.md")
    assert read_text(layout.memory / "memory.md") == ""
    assert_journal_agrees(home)


KINDS = ("add", "remove", "replace", "consolidate", "note", "undo")


def arguments(kind: str, n: int, home: Path, data: st.DataObject) -> dict[str, object] | None:
    file = data.draw(st.sampled_from(("memory.md", "user.md")))
    entries = split_entries(read_text(home / "memory" / file))
    text = f"<{n}> entry"
    if kind == "note":
        return {"action": "note", "text": text}
    if kind == "add" or not entries:
        return {"action": "add", "file": file, "text": text}
    index = data.draw(st.integers(0, len(entries) - 1))
    if kind == "remove":
        return {"action": "remove", "file": file, "old_text": entries[index]}
    if kind == "replace":
        return {"action": "replace", "file": file, "old_text": entries[index], "text": text}
    fates = data.draw(
        st.lists(
            st.sampled_from(("kept", "rewritten", "moved", "dropped")),
            min_size=len(entries),
            max_size=len(entries),
        )
    )
    plan = [
        {"entry": i, "fate": fate, **({"text": f"{text} {i}"} if fate == "rewritten" else {})}
        for i, fate in enumerate(fates)
    ]
    return {"action": "consolidate", "file": file, "plan": plan}


@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=6), data=st.data())
def test_any_run_of_writes_with_crashes_and_crashes_during_recovery_stays_consistent(kinds, data):
    # in memory (tests/support/scratch.py): a crash here is raised in process, so the files hold
    # what was written whether or not it reached a disk, and the fsyncs were most of an example
    with scratch_dir() as home, pytest.MonkeyPatch.context() as patch:
        for n, kind in enumerate(kinds):
            at = data.draw(st.none() | st.integers(0, 4), label="crash at")
            again = data.draw(st.none() | st.integers(0, 4), label="crash again in recovery")
            torn = data.draw(st.booleans(), label="torn")
            w = writer(home)
            args = None if kind == "undo" else arguments(kind, n, home, data)
            undo = data.draw(st.sampled_from(("memory.md", "user.md")))
            with patch.context() as armed:
                CrashPoints(at, raise_crash, torn=torn).install(armed.setattr)
                try:
                    if args is None:
                        w.undo(undo)
                    else:
                        w.write(ARGS.validate_python(args), CALLER)
                except (Crash, WriteRefused, CommandRefused):  # refused: a limit, nothing to undo
                    pass
            with patch.context() as armed:
                CrashPoints(again, raise_crash, torn=torn).install(armed.setattr)
                with contextlib.suppress(Crash):
                    writer(home)  # a restart that may crash while it recovers
            writer(home)
            assert_journal_agrees(home)
