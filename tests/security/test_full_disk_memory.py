"""Class 9 (issue 31): the built-in ``memory`` tool keeps the audit log's reserve (attack 31e, B4;
docs/decisions/memory-writes-keep-the-reserve.md).

The memory tool needs no grant and no mount: memoryd writes notes.md and the journal on the
state filesystem itself. Against the real ``memoryd serve`` behind the real ``brokerd serve``
(calls on broker.sock, as loopd sends them), with the state directory on a small tmpfs:

- a memory write is refused ("failed", the message says the disk is low and names
  ``[broker] audit_reserve_bytes``, or ``audit_reserve_inodes``) while it would leave less than
  the reserve free, bytes or inodes; the free room never falls below the reserve through memory
  writes, however many a session makes;
- nothing written is lost or torn: notes.md holds exactly the notes that were answered "ok",
  whole, the journal agrees, no intent or temporary file is left;
- memoryd goes on answering reads (recall), and once the owner frees space the next write is
  accepted by the same daemons, no restart.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from memoryd.journal import Journal
from memoryd.notes import read_notes

from .laundering_support import scripted_rig
from .test_audit_every_request import exchange, tool_call
from .test_full_disk import fill_to, free, small_disk
from .test_full_disk_classes import tmpfs

pytestmark = pytest.mark.sandbox

RESERVE = 6 * 1024 * 1024
INODE_RESERVE = 100
NOTE = "heron " + "N" * 3980


class Caller:
    def __init__(self, sock: Path):
        self.sock = sock
        self.calls = 0

    def __call__(self, tool: str, args: dict, session: str = "m") -> dict:
        self.calls += 1
        frame = exchange(self.sock, tool_call({"session": session, "call": self.calls,
                                               "tool": tool, "arguments": json.dumps(args)}))
        assert frame.kind == "tool_response", frame
        return dict(frame.body)


def noted(answer: dict) -> str:
    found = re.fullmatch(r"Noted as note (\S+) in notes\.md\.", answer["content"])
    assert answer["status"] == "ok" and found, answer
    return found[1]


def whole(home: Path, ids: list[str]) -> None:
    """notes.md holds exactly the notes answered ok, whole; the journal agrees; nothing left."""
    memory = home / "memory"
    assert [note.id for note in read_notes(memory / "notes.md")] == ids
    assert [i for e in Journal(memory / "edits").entries() for i in e.notes] == ids
    assert not [p.name for p in (memory / "edits").iterdir()
                if p.name.endswith((".intent", ".tmp"))]


def fill_until_refused(call: Caller, room: Callable[[], None], limit: int,
                       text: str) -> tuple[list[str], dict]:
    ids = []
    for n in range(limit):
        answer = call("memory", {"action": "note", "text": f"{n} {text}"})
        if answer["status"] != "ok":
            return ids, answer
        ids.append(noted(answer))
        room()
    raise AssertionError(f"{limit} notes written and none refused")


def test_memory_writes_stop_at_the_byte_reserve_and_reads_go_on(short_dir):
    with small_disk(short_dir) as disk, scripted_rig(short_dir, roles=("memoryd", "brokerd"),
                      extra_config=f"audit_reserve_bytes = {RESERVE}\n") as rig:
        call, home = Caller(rig.stack.socket("brokerd")), rig.stack.home
        fill_to(disk / "filler", RESERVE + 512 * 1024)

        def above_reserve() -> None:
            assert free(disk) >= RESERVE, free(disk)

        ids, refused = fill_until_refused(call, above_reserve, 400, NOTE)
        assert ids, "the first note, with room for it, was refused"
        assert refused["status"] == "failed", refused
        assert "the disk is low" in refused["content"], refused
        assert "[broker] audit_reserve_bytes" in refused["content"], refused
        above_reserve()
        # An identity edit is a memory write too.
        added = call("memory", {"action": "add", "file": "memory.md", "text": "herons"},
                     session="p")
        assert added["status"] == "failed" and "audit_reserve_bytes" in added["content"]
        whole(home, ids)
        recalled = call("recall", {"query": "heron", "k": 3})
        assert recalled["status"] == "ok" and json.loads(recalled["content"])["results"]

        (disk / "filler").unlink()  # the owner frees space: no restart
        ids.append(noted(call("memory", {"action": "note", "text": "after the fill"})))
        whole(home, ids)


def test_memory_writes_stop_at_the_inode_reserve(short_dir):
    with tmpfs(short_dir, "size=64m,nr_inodes=400") as disk:
        rig_root = short_dir / "b"  # tmpfs binds the disk's home at b/home
        home = rig_root / "home"
        config = f"audit_reserve_bytes = 1048576\naudit_reserve_inodes = {INODE_RESERVE}\n"
        with scripted_rig(rig_root, roles=("memoryd", "brokerd"), extra_config=config) as rig:
            assert rig.stack.home == home
            call = Caller(rig.stack.socket("brokerd"))
            fillers = disk / "fillers"
            fillers.mkdir()
            n = 0
            while os.statvfs(disk).f_favail > INODE_RESERVE + 12:
                (fillers / f"f{n}").touch()
                n += 1

            def above_reserve() -> None:
                assert os.statvfs(disk).f_favail >= INODE_RESERVE

            ids, refused = fill_until_refused(call, above_reserve, 100, "an inode each")
            assert ids and refused["status"] == "failed", refused
            assert "the disk is low" in refused["content"], refused
            assert "[broker] audit_reserve_inodes" in refused["content"], refused
            above_reserve()
            whole(home, ids)
            recalled = call("recall", {"query": "inode", "k": 3})
            assert recalled["status"] == "ok", recalled

            for path in list(fillers.iterdir())[:50]:
                path.unlink()
            ids.append(noted(call("memory", {"action": "note", "text": "after the fill"})))
            whole(home, ids)
