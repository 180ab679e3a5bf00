"""The audit log: append-only, hash-chained across rotated files; verify() names every edited,
deleted, inserted or reordered record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from brokerd.audit import GENESIS, AuditLog, entries, log_files, verify
from brokerd.errors import AuditError
from bxcore.canonical import canonical_json
from bxcore.tools import DecisionRecord
from bxcore.util import sha256


def denial(call: int, session: str = "s1") -> DecisionRecord:
    return DecisionRecord(session=session, call=call, tool="echo",
                          arguments_sha256=sha256(b"{}"), verdict="deny", grant=None,
                          reason="no grant matches")


def fill(directory: Path, count: int = 12, rotate: int = 1200) -> AuditLog:
    """``count`` records appended one after another, each awaited before the next."""
    log = AuditLog(directory, rotate_bytes=rotate)

    async def append() -> None:
        for call in range(count):
            await log.decision(decision=denial(call))

    asyncio.run(append())
    return log


def lines(directory: Path) -> list[tuple[Path, int, bytes]]:
    return [(p, i, raw) for p in log_files(directory)
            for i, raw in enumerate(p.read_bytes().splitlines(keepends=True))]


def rewrite(directory: Path, rows: list[tuple[Path, int, bytes]]) -> None:
    by_file: dict[Path, list[bytes]] = {p: [] for p in log_files(directory)}
    for path, _, raw in rows:
        by_file[path].append(raw)
    for path, raws in by_file.items():
        path.write_bytes(b"".join(raws))


def rehashed(body: dict) -> bytes:
    """A record line as a forger who knows the format would write it."""
    body = {k: v for k, v in body.items() if k != "hash"}
    return canonical_json({**body, "hash": sha256(canonical_json(body))}) + b"\n"


def test_a_whole_log_verifies_across_rotation(tmp_path):
    log = fill(tmp_path)
    assert len(log_files(tmp_path)) > 2
    bad, head = verify(tmp_path)
    assert bad == [] and head.count == 12 and head == log.head


def test_each_record_hashes_its_canonical_form_including_the_previous_hash(tmp_path):
    fill(tmp_path, count=2)
    first, second = (json.loads(raw) for _, _, raw in lines(tmp_path))
    assert first["prev"] == GENESIS and second["prev"] == first["hash"]
    body = {k: v for k, v in second.items() if k != "hash"}
    assert second["hash"] == sha256(canonical_json(body))
    assert [e.seq for e in entries(tmp_path)] == [1, 2]


def test_a_reopened_log_continues_the_chain(tmp_path):
    fill(tmp_path, count=3)
    fill(tmp_path, count=3)
    assert verify(tmp_path)[0] == [] and verify(tmp_path)[1].count == 6


def test_an_edited_record_is_named(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    path, number, raw = rows[5]
    rows[5] = (path, number, raw.replace(b'"deny"', b'"allow"'))
    rewrite(tmp_path, rows)
    (bad,) = verify(tmp_path)[0]
    assert (bad.seq, bad.problem, bad.file) == (6, "edited", path.name)


def test_an_edit_with_its_hash_recomputed_is_named(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    path, number, raw = rows[5]
    body = json.loads(raw)
    body["decision"]["verdict"] = "allow"
    rows[5] = (path, number, rehashed(body))
    rewrite(tmp_path, rows)
    (bad,) = verify(tmp_path)[0]
    assert (bad.seq, bad.problem) == (6, "edited")


def test_a_deleted_record_is_named_by_its_sequence_number(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    del rows[4]
    rewrite(tmp_path, rows)
    (bad,) = verify(tmp_path)[0]
    assert (bad.seq, bad.problem) == (6, "deleted") and "record 5" in bad.detail


def test_a_deleted_first_record_is_named(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    del rows[0]
    rewrite(tmp_path, rows)
    (bad,) = verify(tmp_path)[0]
    assert (bad.seq, bad.problem) == (2, "deleted")


def test_a_whole_deleted_file_in_the_middle_is_found(tmp_path):
    fill(tmp_path)
    files = log_files(tmp_path)
    missing = [json.loads(raw)["seq"] for raw in files[1].read_bytes().splitlines()]
    files[1].unlink()
    (bad,) = verify(tmp_path)[0]
    assert bad.problem == "deleted" and bad.seq == missing[-1] + 1


def test_an_inserted_record_is_named(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    # A forger who knows the format: a well-formed record chained to the one before it.
    previous = json.loads(rows[3][2])
    body = {**previous, "seq": previous["seq"] + 1, "prev": previous["hash"]}
    body["decision"] = {**body["decision"], "verdict": "allow", "call": 99}
    rows.insert(4, (rows[3][0], 0, rehashed(body)))
    rewrite(tmp_path, rows)
    (bad,) = verify(tmp_path)[0]
    assert bad.problem == "inserted" and bad.seq == 5
    assert bad.line == 5 - sum(1 for p, _, _ in rows[:4] if p != rows[3][0])


def test_a_copied_record_is_named(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    rows.insert(8, rows[2])
    rewrite(tmp_path, rows)
    found = verify(tmp_path)[0]
    assert [b.problem for b in found] == ["inserted"] and found[0].seq == 3


def test_reordered_records_are_named(tmp_path):
    fill(tmp_path, rotate=1 << 20)  # one file, so the swap stays inside it
    rows = lines(tmp_path)
    rows[4], rows[5] = rows[5], rows[4]
    rewrite(tmp_path, rows)
    found = verify(tmp_path)[0]
    assert [(b.problem, b.seq) for b in found] == [("reordered", 6)]


def test_reordering_across_rotated_files_is_named(tmp_path):
    fill(tmp_path)
    files = log_files(tmp_path)
    a, b = files[0].read_bytes(), files[1].read_bytes()
    files[0].write_bytes(b)
    files[1].write_bytes(a)
    found = verify(tmp_path)[0]
    assert found and {b.problem for b in found} == {"reordered"}


def test_a_line_that_is_not_a_record_is_named(tmp_path):
    fill(tmp_path)
    rows = lines(tmp_path)
    rows.insert(2, (rows[2][0], 0, b"garbage\n"))
    rewrite(tmp_path, rows)
    found = verify(tmp_path)[0]
    assert [b.problem for b in found] == ["malformed"]


def test_a_torn_last_line_is_kept_aside_cut_off_and_recorded_at_open(tmp_path):
    """A crash in the middle of a write leaves bytes that end no line: at open they move to a
    file beside the log, are cut off, and a 'repaired' record says so; the chain is whole."""
    fill(tmp_path, count=2)
    last = log_files(tmp_path)[-1]
    data = last.read_bytes()
    good = data[:-5].rfind(b"\n") + 1
    last.write_bytes(data[:-5])
    log = AuditLog(tmp_path)
    (repair,) = [e for e in entries(tmp_path) if e.kind == "repaired"]
    kept = tmp_path / repair.cut_kept
    assert kept.read_bytes() == data[good:-5] and repair.cut_at == good
    assert repair.cut_sha256 == sha256(data[good:-5]) and repair.cut_file == last.name
    bad, head = verify(tmp_path)
    assert bad == [] and head == log.head and head.count == 2


def test_an_edited_last_record_is_refused_at_open(tmp_path):
    fill(tmp_path, count=2)
    last = log_files(tmp_path)[-1]
    last.write_bytes(last.read_bytes().replace(b'"s1"', b'"s2"'))
    with pytest.raises(AuditError, match="does not match its hash"):
        AuditLog(tmp_path)


def test_audit_files_are_readable_by_the_units_group_and_by_no_one_else(tmp_path):
    """The owner's `bxctl audit verify` reads them through the units' group; none may write."""
    fill(tmp_path, count=1)
    assert log_files(tmp_path)[0].stat().st_mode & 0o777 == 0o640
