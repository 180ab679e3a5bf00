"""A failed append leaves a log that restarts and verifies, and the log recovers by itself.

A real disk cannot be made to fail at a chosen byte, so here the fault is injected at
``os.write`` in brokerd.audit.log: after a budget of bytes every write fails (ENOSPC or EIO),
as a filling or dying disk does; optionally the cut back fails too (``os.truncate``), leaving
the torn bytes on disk. Property, for any budget, batch and fault:

- every append of the failed batch raises AuditError, none returns as durable;
- a brokerd that restarts on the log right then (a copy of the directory) opens, the chain
  verifies, and it holds every record appended before the fault (a torn end is repaired and
  recorded at that start);
- the same running log, once the disk takes writes again, appends the next record, with no
  restart, and the chain verifies with it.

tests/security/test_full_disk.py does the same with a real full filesystem.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil

import pytest
from brokerd.audit import AuditLog, entries, log_files, verify
from brokerd.errors import AuditError
from bxcore.tools import DecisionRecord
from bxcore.util import sha256
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.disks import REAL_WRITE, FailingDisk


def denial(session: str, call: int, reason: str = "no grant matches") -> DecisionRecord:
    return DecisionRecord(session=session, call=call, tool="fs.read",
                          arguments_sha256=sha256(b"{}"), verdict="deny", grant=None,
                          reason=reason)


def record_size(tmp_path_factory, reason: str) -> int:
    """The bytes of one record of the batch (give or take a digit of its seq)."""
    directory = tmp_path_factory.mktemp("measure")
    asyncio.run(AuditLog(directory).decision(decision=denial("s1", 0, reason)))
    return log_files(directory)[0].stat().st_size


@pytest.fixture
def disk(monkeypatch) -> FailingDisk:
    made = FailingDisk()
    monkeypatch.setattr("brokerd.audit.log.os.write", made.write)
    monkeypatch.setattr("brokerd.audit.log.os.truncate", made.truncate)
    return made


# The fixture's fault is set and lifted inside each example.
@settings(max_examples=by_profile(60, 5_000),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.integers(0, 4), batch=st.integers(1, 6),
       share=st.floats(0, 1, exclude_max=True),
       code=st.sampled_from([errno.ENOSPC, errno.EIO]), cut_fails=st.booleans(),
       long_reason=st.booleans(), rotate=st.sampled_from([600, 64 * 1024]))
def test_a_write_failing_at_any_byte_leaves_a_log_that_restarts_verifies_and_recovers(
        tmp_path_factory, disk, before, batch, share, code, cut_fails, long_reason, rotate):
    directory = tmp_path_factory.mktemp("audit")
    reason = "x" * 9_000 if long_reason else "no grant matches"
    budget = int(share * batch * record_size(tmp_path_factory, reason))
    log = AuditLog(directory, rotate_bytes=rotate)

    async def fault() -> list[object]:
        for call in range(before):
            await log.decision(decision=denial("s0", call, reason))
        disk.budget, disk.code, disk.cut_fails = budget, code, cut_fails
        try:
            return await asyncio.gather(*(log.decision(decision=denial("s1", call, reason))
                                          for call in range(batch)), return_exceptions=True)
        finally:
            disk.budget = None

    outcomes = asyncio.run(fault())
    failed = [o for o in outcomes if isinstance(o, AuditError)]
    assert failed, "a batch whose write failed was taken as durable"
    assert all("audit log cannot be written" in str(o) for o in failed)
    written = len(outcomes) - len(failed)  # a budget larger than some first batch

    # A restart right now, on a copy of what the disk holds. With the cut back failed, whole
    # records of the failed batch may be there (never acknowledged, their calls never ran),
    # and the torn rest is repaired and recorded.
    copy = tmp_path_factory.mktemp("restart") / "audit"
    shutil.copytree(directory, copy)
    restarted = AuditLog(copy)
    bad, head = verify(copy)
    kept = list(entries(copy))
    repaired = [e for e in kept if e.kind == "repaired"]
    assert bad == [] and head == restarted.head
    assert [e.decision.session for e in kept[:before + written]] == \
        ["s0"] * before + ["s1"] * written
    assert len(repaired) <= 1 and (cut_fails or not repaired)
    if not cut_fails:
        assert head.count == before + written

    # The running log goes on by itself once writes succeed.
    asyncio.run(log.decision(decision=denial("s2", 0)))
    bad, head = verify(directory)
    assert bad == [] and head == log.head and head.count == before + written + 1
    assert [e.decision.session for e in entries(directory)][-1] == "s2"
    for path in log_files(directory):
        assert path.read_bytes().endswith(b"\n") or path.stat().st_size == 0


def test_an_append_that_finds_the_disk_full_is_made_in_the_logs_held_room(tmp_path,
                                                                          monkeypatch):
    """The disk is full until the log frees the room it holds (audit/reserve): the append
    that found it full is made again there, and succeeds; the room is held again once the
    reserve is free beside it."""
    log = AuditLog(tmp_path, reserve_bytes=64 * 1024)
    room = tmp_path / "reserve"
    assert room.stat().st_size == 64 * 1024

    written: list[int] = []

    def full_while_held(fd: int, data: bytes | memoryview) -> int:
        if room.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(REAL_WRITE(fd, data))
        return written[-1]

    monkeypatch.setattr("brokerd.audit.log.os.write", full_while_held)
    asyncio.run(log.decision(decision=denial("s1", 1)))
    assert written  # made once the room was freed
    assert room.stat().st_size == 64 * 1024  # this disk, not really full, has room again
    bad, head = verify(tmp_path)
    assert bad == [] and head == log.head and head.count == 1
