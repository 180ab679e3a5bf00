"""The egress log (brokerd.egresslog) under a failing disk keeps only whole records, and goes on.

As tests/brokerd/test_audit_write_faults.py does for the audit log, the fault is injected at
``os.write``: after a budget of bytes every write fails (ENOSPC or EIO); optionally the cut back
fails too (``os.ftruncate``), leaving the torn bytes on disk until the next append. Property,
for any records, budget and fault:

- an append that fails raises EgressLogError (the caller sends nothing), one that returns is on
  disk;
- the log, read at any moment, is exactly the records whose append returned, in order (a torn
  end from a failed cut back is left out by the reader, never refused);
- once the disk takes writes again the next append goes on, with no restart, after the last
  whole record, and a torn end it finds is kept beside the log byte for byte.

tests/security/test_full_disk_classes.py does the same with a real full filesystem.
"""

from __future__ import annotations

import errno
import json
import os

from brokerd.egresslog import ConsultEgress
from brokerd.errors import EgressLogError
from brokerd.policy import CallArguments
from bxcore.config import ConsultSection
from bxcore.tools import ToolRequest
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.disks import REAL_FTRUNCATE, REAL_WRITE, FailingDisk
from support.egresslog import read_egress_log

SECTION = ConsultSection.model_validate({"endpoint": "http://127.0.0.1:9/v1", "model": "m"})


def send(egress: ConsultEgress, call: int, question: str) -> None:
    request = ToolRequest(session="s", call=call, tool="consult",
                          arguments=json.dumps({"question": question}))
    egress.record(request, CallArguments.parse(request.arguments), "g")


@settings(max_examples=by_profile(60, 3_000), suppress_health_check=[HealthCheck.too_slow])
@given(questions=st.lists(st.text(max_size=300), min_size=1, max_size=6),
       faulty=st.sets(st.integers(0, 5)), budget=st.integers(0, 400),
       code=st.sampled_from([errno.ENOSPC, errno.EIO]), cut_fails=st.booleans())
def test_a_failed_append_at_any_byte_leaves_whole_records_and_the_log_goes_on(
        tmp_path_factory, questions, faulty, budget, code, cut_fails):
    directory = tmp_path_factory.mktemp("egress")
    egress = ConsultEgress(SECTION, directory)
    disk = FailingDisk()
    sent: list[int] = []
    os.write, os.ftruncate = disk.write, disk.ftruncate  # type: ignore[assignment]
    try:
        for call, question in enumerate(questions):
            if call in faulty:
                disk.budget, disk.code, disk.cut_fails = budget, code, cut_fails
            try:
                send(egress, call, question)
                sent.append(call)
            except EgressLogError as exc:
                assert "cannot append" in str(exc) or "torn" in str(exc)
            finally:
                disk.budget = None
            assert [r.call for r in read_egress_log(egress.path)] == sent
    finally:
        os.write, os.ftruncate = REAL_WRITE, REAL_FTRUNCATE  # type: ignore[assignment]
    torn = egress.path.read_bytes().rpartition(b"\n")[2] if egress.path.exists() else b""
    send(egress, 99, "after")
    assert [r.call for r in read_egress_log(egress.path)] == [*sent, 99]
    assert egress.path.read_bytes().endswith(b"\n")
    if torn:
        assert torn in [p.read_bytes() for p in directory.glob("consult.jsonl.torn-*")]


@settings(max_examples=by_profile(40, 1_000))
@given(whole=st.integers(0, 3), tail=st.binary(min_size=1, max_size=200).filter(
    lambda b: b"\n" not in b))
def test_a_log_a_crash_left_torn_is_read_and_repaired_not_refused(tmp_path_factory, whole, tail):
    directory = tmp_path_factory.mktemp("egress")
    egress = ConsultEgress(SECTION, directory)
    for call in range(whole):
        send(egress, call, "q")
    with egress.path.open("ab") as handle:
        handle.write(tail)
    assert [r.call for r in read_egress_log(egress.path)] == list(range(whole))
    send(egress, 50, "next")
    assert [r.call for r in read_egress_log(egress.path)] == [*range(whole), 50]
    (kept,) = directory.glob("consult.jsonl.torn-*")
    assert kept.read_bytes() == tail
