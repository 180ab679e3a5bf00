"""A memory write on a disk that fills is refused whole, never torn (memoryd/intent.py;
docs/decisions/memory-writes-keep-the-reserve.md; attack 31e, B4).

memoryd refuses a session's write before it writes anything while the write would leave less
than the audit log's reserve free (tests/security/test_full_disk_memory.py, on a real tmpfs). A
disk filled past that by another writer can still fail any step of a write. Here every durable
step of every kind of write fails in turn, with ENOSPC or EIO, the append after writing part of
its bytes and the temporary file of a replace left half written, and the disk stays full for
every step after it. Then: the write is refused (WriteRefused, never a bare OSError), notes.md
parses (no torn entry: recall reads it whole), no temporary file is left; once the disk takes
writes again, the state is exactly what it was before the write, or exactly what the write
makes when it had passed its commit point (the identity file), and the journal agrees.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bxcore.tools import DataClass
from memoryd import intent, journal
from memoryd.errors import WriteRefused
from memoryd.intent import Reserve
from memoryd.layout import Layout
from memoryd.notes import read_notes
from memoryd.writer import Caller

from .crashpoints import (
    ARGS,
    OPS,
    CrashPoints,
    assert_journal_agrees,
    raise_crash,
    setup,
    state,
    writer,
)


class FullDisk:
    """From durable step ``at`` on, every write fails with ``code``; the step at ``at`` writes
    ``part`` (a fraction) of its bytes first: an append its prefix, a replace its temp file."""

    def __init__(self, at: int, code: int, part: float, landed: bool = False):
        self.at, self.code, self.part = at, code, part
        self.landed = landed  # the step at ``at`` lands whole, then fails (its fsync, say)
        self.steps = 0

    def install(self, patch: pytest.MonkeyPatch) -> None:
        for module, name in ((intent, "write_durably"), (intent, "append_bytes"),
                             (journal, "write_durably")):
            patch.setattr(module, name, self._wrap(name, getattr(module, name)))

    def _wrap(self, name: str, real: Callable[..., None]) -> Callable[..., None]:
        def step(path: Path, data: bytes, *rest: Any, **options: Any) -> None:
            self.steps += 1
            if self.steps - 1 < self.at:
                return real(path, data, *rest, **options)
            if self.steps - 1 == self.at and self.landed:
                real(path, data, *rest, **options)
            if self.steps - 1 == self.at and self.part:
                cut = data[: int(len(data) * self.part)]
                if name == "append_bytes":
                    real(path, cut)
                else:
                    path.with_name(f".{path.name}.tmp").write_bytes(cut)
            raise OSError(self.code, errno.errorcode[self.code])

        return step


def durable_steps(home: Path, op: str) -> tuple[tuple[object, ...], tuple[object, ...], int]:
    """The state before and after ``op`` on a disk with room, and its steps but the discard."""
    setup(home)
    before = state(home)
    with pytest.MonkeyPatch.context() as patch:
        points = CrashPoints(None, raise_crash).install(patch.setattr)
        OPS[op](writer(home))
    return before, state(home), sum(1 for s in points.steps if not s.endswith("_discard"))


def no_temporary_file(home: Path) -> None:
    memory = home / "memory"
    left = [p.name for d in (memory, memory / "edits") for p in d.iterdir()
            if p.name.endswith(".tmp")]
    assert left == []


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_write_failing_at_any_step_is_refused_and_leaves_before_or_after(tmp_path, op):
    before, after, steps = durable_steps(tmp_path / "reference", op)
    assert steps == (3 if op == "note" else 4)  # intent, [identity file], notes, entry
    for at in range(steps):
        for code, part in ((errno.ENOSPC, 0.0), (errno.ENOSPC, 0.5), (errno.EIO, 0.5)):
            home = tmp_path / f"{at}-{code}-{part}"
            setup(home)
            w = writer(home)
            with pytest.MonkeyPatch.context() as patch:
                FullDisk(at, code, part).install(patch)
                with pytest.raises(WriteRefused):
                    OPS[op](w)
            read_notes(Layout(home).notes)  # whole: a torn entry would raise StoreError
            no_temporary_file(home)
            writer(home)  # the disk takes writes again: the next writer recovers
            # Past the commit point (the identity file holds the new text) the write is
            # completed; before it, nothing of it is left. A note's commit point is its
            # journal entry's: its append is cut back when the entry cannot be written.
            took_effect = op != "note" and at >= 2  # 0 intent, 1 identity file, 2 notes...
            assert state(home) in (before, after), (op, at, code, part)
            assert state(home) == (after if took_effect else before), (op, at, code, part)
            assert_journal_agrees(home)
            writer(home).write(ARGS.validate_python({"action": "note", "text": "next"}),
                               Caller(session="s2", data_class=DataClass.PUBLIC,
                                      untrusted=False))
            assert_journal_agrees(home)


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_step_that_lands_and_then_fails_leaves_what_the_journal_says(tmp_path, op):
    """A failing disk can take a step whole and then fail it (EIO on the fsync after a rename
    or an append). Whatever step that is, the files end as before or after the write, and the
    journal agrees; once the journal entry landed the write is done and answered so, never cut
    back (attack 31f: notes.md lost a note the journal listed, and the next note got its id)."""
    before, after, steps = durable_steps(tmp_path / "reference", op)
    for at in range(steps):
        home = tmp_path / f"landed-{at}"
        setup(home)
        with pytest.MonkeyPatch.context() as patch:
            FullDisk(at, errno.EIO, 0.0, landed=True).install(patch)
            if at == steps - 1:  # the journal entry: recorded
                OPS[op](writer(home))
            else:
                with pytest.raises(WriteRefused):
                    OPS[op](writer(home))
        read_notes(Layout(home).notes)
        writer(home)  # the next writer recovers
        took_effect = at == steps - 1 or (op != "note" and at >= 1)  # 1: the identity file
        assert state(home) == (after if took_effect else before), (op, at)
        assert_journal_agrees(home)
        writer(home).write(ARGS.validate_python({"action": "note", "text": "next"}),
                           Caller(session="s2", data_class=DataClass.PUBLIC, untrusted=False))
        assert_journal_agrees(home)


def test_a_session_write_is_refused_before_anything_is_written_below_the_reserve(tmp_path):
    """The check itself, on this machine's disk: a reserve larger than what is free refuses a
    note and an identity edit with the disk-low text naming both settings' kinds; the owner's
    undo is not a session's write and is not refused."""
    home = tmp_path / "home"
    setup(home)
    before = state(home)
    huge = Reserve(size=2**62, inodes=0)
    w = writer(home)
    w._reserve = huge
    for args in ({"action": "note", "text": "one more"},
                 {"action": "add", "file": "user.md", "text": "one more"}):
        with pytest.raises(WriteRefused, match=r"the disk is low.*\[broker\] audit_reserve_bytes"):
            w.write(ARGS.validate_python(args), Caller(session="s", data_class=DataClass.PUBLIC,
                                                       untrusted=False))
    assert state(home) == before
    w._reserve = Reserve(size=0, inodes=2**62)
    with pytest.raises(WriteRefused, match=r"audit_reserve_inodes"):
        w.write(ARGS.validate_python({"action": "note", "text": "x"}),
                Caller(session="s", data_class=DataClass.PUBLIC, untrusted=False))
    w._reserve = huge
    w.undo("memory.md")  # the owner's command
    assert state(home) != before
