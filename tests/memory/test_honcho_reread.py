"""The Honcho sync leaves unread what cannot give anything new: the pure read-or-skip decision,
then passes against the fake Honcho, counting the log reads and notes.md parses the sync makes."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from bxcore.canonical import canonical_json
from memoryd.honcho import sync as sync_module
from memoryd.honcho.client import HonchoClient
from memoryd.honcho.reread import (
    FileStamp,
    ReadCache,
    RereadDecision,
    Signature,
    reread_decision,
    signature,
)
from memoryd.taint import CLEAN, SessionTaint
from memoryd.wiring import build

from .support import answer, call, config, turn, user, write_taint
from .test_honcho import HONCHO, contents, fake, home, run, service  # noqa: F401  (fixtures)

READ, SKIP = RereadDecision.READ, RereadDecision.SKIP


# -- the decision (pure) ------------------------------------------------------------------------

def sig(*files: tuple[int, int, int], taint: SessionTaint | None = CLEAN,
        names: str = "abc") -> Signature:
    return Signature(files=tuple(FileStamp(path=f"{names[i]}.jsonl", size=s, mtime_ns=m, inode=n)
                                 for i, (s, m, n) in enumerate(files)), taint=taint)


BEFORE = sig((100, 5, 7), (40, 6, 8))
ROWS = [
    ("never read since the start", None, BEFORE, True, READ),
    ("unchanged, settled", BEFORE, sig((100, 5, 7), (40, 6, 8)), True, SKIP),
    ("unchanged, not settled", BEFORE, sig((100, 5, 7), (40, 6, 8)), False, READ),
    ("appended (size)", BEFORE, sig((100, 5, 7), (90, 9, 8)), True, READ),
    ("rewritten in place, same size (mtime)", BEFORE, sig((100, 5, 7), (40, 7, 8)), True, READ),
    ("replaced, same size and mtime (inode)", BEFORE, sig((100, 5, 7), (40, 6, 9)), True, READ),
    ("a new epoch file", BEFORE, sig((100, 5, 7), (40, 6, 8), (1, 1, 1)), True, READ),
    ("an epoch file gone", BEFORE, sig((100, 5, 7)), True, READ),
    ("the same stamps on another file", BEFORE, sig((100, 5, 7), (40, 6, 8), names="ax"), True,
     READ),
    ("the taint changed", BEFORE, sig((100, 5, 7), (40, 6, 8),
                                      taint=SessionTaint(untrusted=True)), True, READ),
    ("notes.md unchanged, settled", sig((9, 1, 2), taint=None), sig((9, 1, 2), taint=None), True,
     SKIP),
]


@pytest.mark.parametrize(("before", "now", "settled", "expected"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_decide(before, now, settled, expected):
    assert reread_decision(before, now, settled) is expected


def test_the_cache_reads_what_it_never_saw_and_forgets_what_is_gone():
    cache = ReadCache()
    assert cache.decide("session:s1", BEFORE) is READ
    cache.record("session:s1", BEFORE, settled=True)
    cache.record("session:s2", BEFORE, settled=False)
    assert (cache.decide("session:s1", BEFORE), cache.decide("session:s2", BEFORE)) == (SKIP, READ)
    cache.keep_only(["session:s2"])
    assert cache.decide("session:s1", BEFORE) is READ and len(cache) == 1


def test_a_signature_sees_a_same_size_rewrite_and_a_missing_file(tmp_path: Path):
    path = tmp_path / "0.jsonl"
    path.write_bytes(b"one\n")
    first = signature([path])
    path.write_bytes(b"two\n")
    os.utime(path, ns=(first.files[0].mtime_ns + 1, first.files[0].mtime_ns + 1))
    assert signature([path]) != first
    assert signature([tmp_path / "absent"]).files[0].size == -1


# -- passes against the fake Honcho ---------------------------------------------------------------

@pytest.fixture
def reads(monkeypatch) -> Counter[str]:
    """How often the sync read each session's log (by session) and parsed notes.md."""
    counted: Counter[str] = Counter()
    real_log, real_notes = sync_module.read_log, sync_module.read_notes

    def read_log(path: Path, skip: int = 0):
        counted[path.parent.name] += 1
        return real_log(path, skip)

    def read_notes(path: Path):
        counted["notes.md"] += 1
        return real_notes(path)

    monkeypatch.setattr(sync_module, "read_log", read_log)
    monkeypatch.setattr(sync_module, "read_notes", read_notes)
    return counted


def sync_pass(service, reads: Counter[str]):  # noqa: F811
    """One pass; returns its report and what it read."""
    reads.clear()
    report = run(service.sync.sync_once())
    return report, dict(reads)


def test_an_unchanged_settled_session_is_not_read_again(service, fake, home, reads):  # noqa: F811
    run(turn(service, home, "s1", [user("q1"), answer("a1")]))
    run(turn(service, home, "s2", [user("q2"), answer("a2")]))
    report, read = sync_pass(service, reads)
    assert report.written == 4 and read == {"s1": 1, "s2": 1, "notes.md": 1}
    report, read = sync_pass(service, reads)
    assert read == {} and (report.read, report.skipped) == (0, 3)
    assert len(fake.messages) == 4


def test_an_appended_turn_is_found_and_written_on_the_next_pass(service, fake, home,  # noqa: F811
                                                                 reads):
    run(turn(service, home, "s1", [user("q1"), answer("a1")]))
    run(turn(service, home, "s2", [user("q2"), answer("a2")]))
    sync_pass(service, reads)
    run(turn(service, home, "s1", [user("q3")]))  # not finished yet: nothing to send
    report, read = sync_pass(service, reads)
    assert read == {"s1": 1} and report.written == 0
    run(turn(service, home, "s1", [answer("a3")]))
    report, read = sync_pass(service, reads)
    assert read == {"s1": 1} and report.written == 2
    assert contents(fake)[-2:] == [("owner", "q3"), ("agent", "a3")]
    assert sync_pass(service, reads)[1] == {}


def test_an_outage_keeps_every_unsettled_session_to_be_read(service, fake, home,  # noqa: F811
                                                            reads):
    run(turn(service, home, "s1", [user("q1"), answer("a1")]))
    sync_pass(service, reads)
    fake.knobs.outage = True
    run(turn(service, home, "s2", [user("q2"), answer("a2")]))
    run(turn(service, home, "s3", [user("q3"), answer("a3")]))
    for _ in range(2):
        report, read = sync_pass(service, reads)
        assert report.outage and read == {"s2": 1, "s3": 1}  # s1 was settled before it
    fake.knobs.outage = False
    report, read = sync_pass(service, reads)
    assert report.written == 4 and read == {"s2": 1, "s3": 1}
    assert sync_pass(service, reads)[1] == {}


def test_a_lost_response_and_a_refusal_keep_the_session_read(service, fake, home,  # noqa: F811
                                                             reads):
    fake.knobs.lose_next_write_response = True
    run(turn(service, home, "lost", [user("q"), answer("a")]))
    assert sync_pass(service, reads)[0].outage
    report, read = sync_pass(service, reads)  # uncertain: read, checked with Honcho, settled
    assert report.found_in_honcho == 2
    assert read == {"lost": 1, "notes.md": 1}  # what the outage pass read is read again
    assert sync_pass(service, reads)[1] == {}
    fake.knobs.reject_writes = True
    run(turn(service, home, "refused", [user("q"), answer("a")]))
    assert sync_pass(service, reads)[0].rejected == 2
    fake.knobs.reject_writes = False
    for _ in range(2):  # refused keys are not sent again, but the session is not settled
        report, read = sync_pass(service, reads)
        assert read == {"refused": 1} and report.written == 0


def rewrite_same_size(path: Path, records: list, how: str) -> None:
    """Replace the log by ``records`` padded to its old size, keeping its inode ("mtime") or its
    mtime ("inode")."""
    old = path.stat()
    lines = [canonical_json(r) for r in records]
    pad = old.st_size - sum(len(line) + 1 for line in lines)
    assert pad >= 0
    lines[0] = canonical_json(user("q1" + " " * pad))
    data = b"".join(line + b"\n" for line in lines)
    if how == "mtime":
        path.write_bytes(data)
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns + 1_000))
    else:
        fresh = path.with_suffix(".new")
        fresh.write_bytes(data)
        os.utime(fresh, ns=(old.st_atime_ns, old.st_mtime_ns))
        fresh.replace(path)
    new = path.stat()
    assert new.st_size == old.st_size
    assert (new.st_mtime_ns, new.st_ino) != (old.st_mtime_ns, old.st_ino)


@pytest.mark.parametrize("how", ["mtime", "inode"])
def test_a_rewritten_file_of_the_same_size_is_read_again(service, fake, home, reads,  # noqa: F811
                                                         how):
    pending = "x" * 200  # a long unfinished turn, so the rewrite can finish it in the same bytes
    run(turn(service, home, "s1", [user("q1"), answer("a1"), user(pending)]))
    sync_pass(service, reads)
    rewrite_same_size(home / "sessions" / "s1" / "0.jsonl",
                      [user("q1"), answer("a1"), user("q2"), answer("a2")], how)
    report, read = sync_pass(service, reads)
    assert read == {"s1": 1} and report.written == 2
    assert contents(fake)[-2:] == [("owner", "q2"), ("agent", "a2")]


def test_a_changed_taint_is_a_changed_session(service, fake, home, reads):  # noqa: F811
    run(turn(service, home, "s1", [user("q1"), answer("a1")]))
    sync_pass(service, reads)
    write_taint(home, "s1", ["public"], untrusted=True)
    report, read = sync_pass(service, reads)
    assert report.read == 1 and read == {}  # tainted: nothing to send, the logs stay unread
    run(turn(service, home, "s1", [user("q2"), answer("a2")]))
    (home / "broker" / "sessions" / "s1.json").unlink()  # e.g. brokerd rebuilt it: clean again
    report, read = sync_pass(service, reads)
    assert read == {"s1": 1} and report.written == 2


def test_notes_md_is_parsed_again_only_when_it_changes(service, fake, home, reads):  # noqa: F811
    run(call(service, "memory", {"action": "add", "file": "user.md", "text": "likes tea"}))
    run(call(service, "memory", {"action": "consolidate", "file": "user.md",
                                 "plan": [{"entry": 0, "fate": "moved"}]}))
    report, read = sync_pass(service, reads)
    assert read == {"notes.md": 1} and report.written == 1
    assert sync_pass(service, reads)[1] == {}
    run(call(service, "memory", {"action": "add", "file": "user.md", "text": "likes rain"}))
    run(call(service, "memory", {"action": "consolidate", "file": "user.md",
                                 "plan": [{"entry": 0, "fate": "moved"}]}))
    report, read = sync_pass(service, reads)
    assert read == {"notes.md": 1} and report.written == 1
    assert [m["content"] for m in fake.messages] == ["likes tea", "likes rain"]


def test_a_restart_reads_everything_once(service, fake, home, reads):  # noqa: F811
    run(turn(service, home, "s1", [user("q1"), answer("a1")]))
    sync_pass(service, reads)
    assert sync_pass(service, reads)[1] == {}
    again = build(config(home, HONCHO),
                          honcho=HonchoClient("http://honcho.test", transport=fake.transport()))
    try:
        report, read = sync_pass(again, reads)
        assert read == {"s1": 1, "notes.md": 1} and report.written == 0
        assert sync_pass(again, reads)[1] == {}
    finally:
        run(again.aclose())
