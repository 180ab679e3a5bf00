"""State from before per-label note ids, whatever its plain numbers, is indexed whole (attack
31f: old notes whose plain numbers skip one left the first new note out of the index for good).

The old index recorded how far it had read notes.md as the highest note id; the new one counts
entries, the same number only while the ids ran 1, 2, 3... Generated old states: plain ids in
file order with gaps of any size (a note the owner deleted, a write cut back), of every label,
and the index exactly as the old code left it (every note in, ``ingested`` at the highest id).
Property: after memoryd starts and sessions write new notes, every note of notes.md is in the
index and recall finds each by its own word, through memoryd's request handling. Duplicate plain
ids are not generated: the old writer never gave one twice, and two entries of one id would
share the index's origin ``note:<id>``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from bxcore.tools import DataClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryd.index import RecallIndex
from memoryd.layout import Layout
from memoryd.notes import PREAMBLE, Note, read_notes
from memoryd.wiring import build
from support.scratch import scratch_dir

from .support import T, call, config

labels = st.tuples(st.sampled_from(list(DataClass)), st.booleans())
CONFIG = '[memory]\nceiling = "secret"\n'


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(old=st.lists(st.tuples(st.integers(0, 3), labels), min_size=1, max_size=8),
       new=st.lists(labels, min_size=1, max_size=4))
def test_every_note_of_any_old_state_is_indexed_and_recalled(old, new):
    # in memory (tests/support/scratch.py): the stores' fsyncs were most of an example
    with scratch_dir() as scratch:
        indexed_and_recalled(scratch / "home", old, new)


def indexed_and_recalled(home: Path, old: list[Any], new: list[Any]) -> None:
    layout = Layout(home)
    layout.ensure()
    number, entries = 0, []
    for n, (gap, (data_class, untrusted)) in enumerate(old):
        number += 1 + gap
        entries.append(Note(id=str(number), kind="note", time=T, session="a",
                            data_class=data_class, untrusted=untrusted, text=f"oldword{n}"))
    layout.notes.write_text(PREAMBLE + "".join(note.render() for note in entries))
    index = RecallIndex(layout.recall_db, layout.sessions, DataClass.SECRET)
    index.add_notes(entries)
    index.close()
    with sqlite3.connect(layout.recall_db) as conn:  # what the old code kept: the highest id
        conn.execute("UPDATE ingested SET upto = ? WHERE source = 'notes.md'", (number,))

    service = build(config(home, CONFIG))

    async def run() -> list[set[str]]:
        for n, (data_class, untrusted) in enumerate(new):
            written = await call(service, "memory", {"action": "note", "text": f"newword{n}"},
                                 data_class=data_class.value, untrusted=untrusted)
            assert written.status == "ok", written
        found = []
        for note in read_notes(layout.notes):
            answer = await call(service, "recall", {"query": note.text, "k": 3},
                                data_class="secret", untrusted=True)
            found.append({hit["origin"] for hit in json.loads(answer.content)["results"]})
        await service.aclose()
        return found

    found = asyncio.run(run())
    notes = read_notes(layout.notes)
    assert len(notes) == len(old) + len(new)
    assert found == [{f"note:{note.id}"} for note in notes]
