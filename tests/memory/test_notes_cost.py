"""A memory call costs what it touches, not every note ever written (attack 31f: memoryd parsed
notes.md whole on every call, and the parse counted lines from the file's start for every
entry: 55 s a call at 8,000 notes, every call timed out past about 9,000 long ones).

- ``NotesFile`` (notes.md as parsed, kept) always gives what a fresh parse of the file gives,
  whatever happens to the file between reads: memoryd's appends, appends by another writer, a
  cut back, the file replaced, or rewritten at the same size; and when the file only grows it
  parses each byte once.
- Through memoryd's request handling, a generated sequence of memory calls (notes, identity
  edits, recalls, a turn) parses each byte of notes.md at most once and each journal entry at
  most once, however many calls there are. Judged by counting what is parsed, not by time
  (bench/memory_calls_bench.py has the times).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from bxcore.tools import DataClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryd import journal, notes
from memoryd.notes import PREAMBLE, Note, NotesFile, read_notes
from memoryd.wiring import build
from support.scratch import scratch_dir

from .support import T, call, config, turn, user

WORDS = ["heron", "kiwi", "mango", "tulip", "plan"]
words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
labels = st.tuples(st.sampled_from(list(DataClass)), st.booleans())


def entry(n: int, text: str, label: tuple[DataClass, bool]) -> str:
    data_class, untrusted = label
    return Note(id=f"{notes.label_of(data_class, untrusted)}-{n}", kind="note", time=T,
                session="s1", data_class=data_class, untrusted=untrusted, text=text).render()


# What can happen to notes.md between two reads.
change = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(words, labels), min_size=1, max_size=3)),
    st.tuples(st.just("replace"), st.lists(st.tuples(words, labels), max_size=3)),
    st.tuples(st.just("cut"), st.integers(0, 5)),
    st.tuples(st.just("same size"), st.integers(0, 5)),
    st.tuples(st.just("read"), st.none()),
)


class Counting:
    """Counts the characters given to notes.parse_notes and the journal entries parsed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.chars = self.entries = 0
        real_parse, real_validate = notes.parse_notes, journal.Edit.model_validate_json

        def parse(text: str, *rest: Any) -> list[Note]:
            self.chars += len(text)
            return real_parse(text, *rest)

        def validate(data: Any, *rest: Any, **options: Any) -> journal.Edit:
            self.entries += 1
            return real_validate(data, *rest, **options)

        monkeypatch.setattr(notes, "parse_notes", parse)
        monkeypatch.setattr(journal.Edit, "model_validate_json", validate)


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(changes=st.lists(change, max_size=12))
def test_the_kept_notes_are_always_what_the_file_holds(tmp_path, changes):
    path = tmp_path / f"notes-{os.urandom(4).hex()}.md"
    kept = NotesFile(path)
    entries: list[str] = []
    for kind, value in changes:
        if kind in ("append", "replace"):
            start = len(entries) if kind == "append" else 0
            fresh = [entry(start + i + 1, text, label) for i, (text, label) in enumerate(value)]
            if kind == "append":
                first = "" if path.exists() else PREAMBLE
                with path.open("a") as handle:
                    handle.write(first + "".join(fresh))
            else:
                path.with_suffix(".new").write_text(PREAMBLE + "".join(fresh))
                path.with_suffix(".new").rename(path)
            entries = entries + fresh if kind == "append" else fresh
        elif kind == "cut" and entries:  # a failed write cut back, or the owner's trim
            entries = entries[: len(entries) - min(value, len(entries))]
            os.truncate(path, len((PREAMBLE + "".join(entries)).encode()))
        elif kind == "same size" and entries:  # one letter changed in place, later on
            text = path.read_text()
            at = len(text) - 3 - value % 3
            path.write_text(text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1:])
            # The kernel stamps mtime from a clock that ticks every few milliseconds; an edit
            # in the same tick as the last read, at the same size, is not seen (notes.py).
            later = path.stat().st_mtime_ns + 1_000_000_000
            os.utime(path, ns=(later, later))
        assert list(kept.notes()) == read_notes(path)


def test_appends_alone_are_parsed_once(tmp_path, monkeypatch):
    path = tmp_path / "notes.md"
    kept = NotesFile(path)
    counting = Counting(monkeypatch)
    for n in range(1, 40):
        with path.open("a") as handle:
            handle.write((PREAMBLE if n == 1 else "") + entry(n, f"kiwi {n}", (DataClass.PUBLIC,
                                                                               False)))
        assert len(kept.notes()) == n
        kept.notes()
    assert counting.chars == path.stat().st_size


memory_call = st.one_of(
    st.builds(lambda t, label: ("note", t, label), words, labels),
    st.builds(lambda t: ("add", t, None), words),
    st.builds(lambda t: ("remove", t, None), st.sampled_from(WORDS)),
    st.builds(lambda t, label: ("recall", t, label), words, labels),
    st.builds(lambda t: ("turn", t, None), words),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(calls=st.lists(memory_call, min_size=1, max_size=25))
def test_memory_calls_parse_each_note_and_entry_once(calls):
    # in memory (tests/support/scratch.py): the stores' fsyncs were most of an example
    with scratch_dir() as scratch:
        parsed_once(scratch / "home", calls)


def parsed_once(home: Path, calls: list[Any]) -> None:
    service = build(config(home, '[memory]\nceiling = "secret"\n'))
    with pytest.MonkeyPatch.context() as patch:
        counting = Counting(patch)

        async def run() -> None:
            for kind, text, label in calls:
                taint: dict[str, Any] = {}
                if label is not None:
                    taint = {"data_class": label[0].value, "untrusted": label[1]}
                if kind == "note":
                    await call(service, "memory", {"action": "note", "text": text}, **taint)
                elif kind in ("add", "remove"):
                    args = {"action": kind, "file": "memory.md",
                            ("text" if kind == "add" else "old_text"): text}
                    await call(service, "memory", args)
                elif kind == "recall":
                    await call(service, "recall", {"query": text, "k": 5}, **taint)
                else:
                    await turn(service, home, "s1", [user(text)])
            await service.aclose()

        asyncio.run(run())
    notes_md = home / "memory" / "notes.md"
    size = notes_md.stat().st_size if notes_md.exists() else 0
    assert counting.chars <= size, (counting.chars, size)
    assert counting.entries <= len(list((home / "memory" / "edits").glob("*.json")))


def test_the_kept_notes_follow_a_file_replaced_under_memoryd(tmp_path: Path):
    """The owner may put another notes.md in place (a restore): the next call reads it."""
    home = tmp_path / "home"
    service = build(config(home))

    async def run() -> list[str]:
        noted = [(await call(service, "memory", {"action": "note", "text": f"kiwi {n}"})).content
                 for n in range(3)]
        replaced = home / "memory" / "notes.new"
        replaced.write_text(PREAMBLE + entry(1, "mango", (DataClass.PUBLIC, False)))
        replaced.rename(home / "memory" / "notes.md")
        noted.append((await call(service, "memory", {"action": "note", "text": "tulip"})).content)
        await service.aclose()
        return noted

    assert asyncio.run(run())[-1] == "Noted as note public-2 in notes.md."
