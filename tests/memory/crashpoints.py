"""Crash points of memoryd's writes, for the recovery tests here and the SIGKILL tests in faults/.

Every durable step of a write goes through one of four functions (the intent and the identity
file through ``intent.write_durably``, notes through ``intent.append_bytes``, the journal entry
through ``journal.write_durably``, the intent's removal through ``intent._discard``). A
``CrashPoints`` wraps them and counts the calls: call number ``at`` does not happen (or, with
``torn``, an append writes half its bytes) and ``crash()`` is called instead, which raises in
process or SIGKILLs a child. After it fires it passes everything through.

Run as a script it is that child: ``crashpoints.py HOME OP AT [torn]`` sets up HOME, then does
OP with the crash armed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bxcore.tools import DataClass
from memoryd import intent, journal
from memoryd.arguments import MemoryArgs
from memoryd.layout import Layout, read_text
from memoryd.notes import label_of, read_notes
from memoryd.writer import Caller, MemoryWriter
from pydantic import TypeAdapter

ARGS: TypeAdapter[MemoryArgs] = TypeAdapter(MemoryArgs)
CALLER = Caller(session="s1", data_class=DataClass.PRIVATE, untrusted=False)
T = "2026-11-30T07:00:00.000000Z"


class Crash(BaseException):
    """A simulated crash: no ``except Exception`` on the way out catches it."""


def raise_crash() -> None:
    raise Crash


def sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashPoints:
    def __init__(self, at: int | None, crash: Callable[[], None], *, torn: bool = False):
        self.at, self.crash, self.torn = at, crash, torn
        self.steps: list[str] = []  # the durable steps seen, by name
        self.fired: str | None = None  # the step the crash replaced

    def install(self, setattr_: Callable[[Any, str, Any], None]) -> CrashPoints:
        """Wrap the four step functions with ``setattr_`` (builtins.setattr or monkeypatch's)."""
        for module, name in (
            (intent, "write_durably"),
            (intent, "append_bytes"),
            (journal, "write_durably"),
            (intent, "_discard"),
        ):
            setattr_(module, name, self._wrap(f"{module.__name__}.{name}", getattr(module, name)))
        return self

    def _wrap(self, label: str, real: Callable[..., None]) -> Callable[..., None]:
        def step(path: Path, *rest: Any, **options: Any) -> None:
            if len(self.steps) == self.at:
                self.at = None  # fire once; recovery after it runs unhindered
                self.steps.append(label)
                self.fired = label
                if self.torn and label.endswith("append_bytes") and len(rest[0]) > 1:
                    real(path, rest[0][: len(rest[0]) // 2], **options)
                self.crash()
                return
            self.steps.append(label)
            real(path, *rest, **options)

        return step


def writer(home: Path, *, stage: bool = False) -> MemoryWriter:
    """memoryd's writer as the service builds it (this is the restart: it recovers)."""
    layout = Layout(home)
    layout.ensure()
    # A private caller that may edit identity: these tests are about crashes, not the ceiling.
    return MemoryWriter(layout, stage_identity_writes=stage, clock=lambda: T,
                        identity_ceiling=DataClass.PRIVATE)


def setup(home: Path) -> None:
    """memory.md with three entries, and staged edit 4 (a replace) for ``accept``."""
    w = writer(home)
    for text in ("A first entry", "B second entry", "C third entry"):
        w.write(ARGS.validate_python({"action": "add", "file": "memory.md", "text": text}), CALLER)
    staged = writer(home, stage=True)
    staged.write(
        ARGS.validate_python(
            {
                "action": "replace",
                "file": "memory.md",
                "old_text": "A first",
                "text": "A, rewritten",
            }
        ),
        CALLER,
    )


def _tool(args: dict[str, Any]) -> Callable[[MemoryWriter], object]:
    return lambda w: w.write(ARGS.validate_python(args), CALLER)


OPS: dict[str, Callable[[MemoryWriter], object]] = {
    "add": _tool({"action": "add", "file": "user.md", "text": "Owner prefers mornings."}),
    "note": _tool({"action": "note", "text": "The build took 4 minutes."}),
    "replace": _tool(
        {"action": "replace", "file": "memory.md", "old_text": "B second", "text": "B, said better"}
    ),
    "remove": _tool({"action": "remove", "file": "memory.md", "old_text": "C third"}),
    "consolidate": _tool(
        {
            "action": "consolidate",
            "file": "memory.md",
            "plan": [
                {"entry": 0, "fate": "kept"},
                {"entry": 1, "fate": "moved"},
                {"entry": 2, "fate": "rewritten", "text": "C, shorter"},
            ],
        }
    ),
    "undo": lambda w: w.undo("memory.md"),
    "accept": lambda w: w.accept(4),
}


def takes_effect(at: int, fired: str | None, torn: bool) -> bool:
    """Whether a crash at step ``at`` comes after the commit point. Step 0 writes the intent;
    step 1 is the commit point: the identity file's rename, or a note's append (which, torn,
    has begun, so the note is completed)."""
    return at > 1 or (at == 1 and torn and fired == "memoryd.intent.append_bytes")


def state(home: Path) -> tuple[object, ...]:
    """Everything the writes keep, comparable across homes (no paths, no lock file)."""
    memory = home / "memory"
    edits = memory / "edits"
    return (
        read_text(memory / "memory.md"),
        read_text(memory / "user.md"),
        (memory / "notes.md").read_bytes() if (memory / "notes.md").exists() else b"",
        sorted((p.name, p.read_bytes()) for p in edits.iterdir() if p.name != ".lock"),
    )


def assert_journal_agrees(home: Path) -> None:
    """The files say what the journal says: no intent is left, each identity file holds the
    latest journalled text and every edit of it starts where the one before ended, and every
    note in notes.md belongs to exactly one journal entry (so none is there twice or orphaned)."""
    layout = Layout(home)
    assert sorted(p.name for p in layout.edits.glob("*.intent")) == []
    entries = journal.Journal(layout.edits).entries()
    for file in ("memory.md", "user.md"):
        text = ""
        for edit in (e for e in entries if e.file == file and e.changes_file):
            assert edit.before == text, (file, edit.seq)
            text = edit.after or ""
        assert read_text(layout.identity(file)) == text, file
    notes = read_notes(layout.notes)
    numbers: dict[str, list[int]] = {}  # each label's notes are numbered 1, 2, 3... in order
    for note in notes:
        label, _, number = note.id.rpartition("-")
        assert label == label_of(note.data_class, note.untrusted), note.id
        numbers.setdefault(label, []).append(int(number))
    assert all(found == list(range(1, len(found) + 1)) for found in numbers.values()), numbers
    assert sorted(i for e in entries for i in e.notes) == sorted(n.id for n in notes)
    by_id = {n.id: n for n in notes}
    for edit in entries:
        for note_id in edit.notes:
            expected = None if edit.file == "notes.md" else edit.file
            assert by_id[note_id].source == expected, (edit.seq, note_id)


if __name__ == "__main__":
    home, op, at = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    setup(home)
    w = writer(home)
    CrashPoints(at, sigkill, torn="torn" in sys.argv[4:]).install(setattr)
    OPS[op](w)
