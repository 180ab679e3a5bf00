"""Group commit of the audit log (issue 19): under many concurrent sessions, records that
arrive together are written together and share one fsync; no call runs before its own record
is durable; the chain is one chain, in one order, and verifies.

"Durable" is what the disk has been told to keep: the fsync below is the real one, wrapped to
note how much of each file it covered, so "the record is durable" means "the record lies in the
part of its file that an fsync covered". The same wrapper injects the fault: at its N-th call it
fails as a dying disk would, and the part covered stops growing there.
"""

from __future__ import annotations

import asyncio
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from brokerd.audit import AuditLog, entries, verify
from brokerd.audit.records import parse_line
from brokerd.errors import AuditError
from brokerd.policy import Decision
from brokerd.sandbox import ToolOutput
from brokerd_support import make_rig, request, write
from bxcore.tools import DecisionRecord
from bxcore.util import sha256

SESSIONS = 50
REAL_FSYNC = os.fsync
ECHO = 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\nresult_class = "public"\n'


@dataclass
class Disk:
    """os.fsync, noting the bytes of each audit file it made durable (fsyncs of other files
    pass through, uncounted); ``fail_at``: the N-th fsync of the audit directory or a file in
    it fails with EIO instead, and no later one makes anything durable (the disk died there)."""

    audit: Path | None = None
    fail_at: int | None = None
    calls: int = 0
    durable: dict[Path, int] = field(default_factory=dict)

    def fsync(self, fd: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if self.audit is None or self.audit not in (target, target.parent):
            REAL_FSYNC(fd)
            return
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        REAL_FSYNC(fd)
        if target.is_file():
            self.durable[target] = os.fstat(fd).st_size

    def records(self) -> list:
        """Every record in the durable part of the audit files, in file order (the open calls'
        checkpoints beside them are not records)."""
        found = []
        for path in sorted(p for p in self.durable if p.suffix == ".jsonl"):
            with path.open("rb") as handle:
                data = handle.read(self.durable[path])
            found += [parse_line(raw)[0] for raw in data.splitlines()]
        return found


@pytest.fixture
def disk(monkeypatch) -> Disk:
    made = Disk()
    monkeypatch.setattr("brokerd.audit.log.os.fsync", made.fsync)
    return made


def denial(session: str, call: int) -> DecisionRecord:
    return DecisionRecord(session=session, call=call, tool="echo",
                          arguments_sha256=sha256(b"{}"), verdict="deny", grant=None,
                          reason="no grant matches")


@dataclass
class Witness:
    """A sandbox backend that, when a call runs, looks at what the disk holds durably."""

    disk: Disk
    ran: list[tuple[str, int]] = field(default_factory=list)
    unrecorded: list[tuple[str, int]] = field(default_factory=list)

    async def run(self, decision: Decision) -> ToolOutput:
        spec = decision.authorize()
        record = decision.record
        durable = {(e.decision.session, e.decision.call) for e in self.disk.records()
                   if e.kind == "decision" and e.decision.verdict == "allow"}
        if (record.session, record.call) not in durable:
            self.unrecorded.append((record.session, record.call))
        self.ran.append((record.session, record.call))
        await asyncio.sleep(0)  # let the other sessions' records arrive meanwhile
        return ToolOutput(content="done", data_class=spec.data_class, untrusted=False,
                          truncated=False)


def witnessed_rig(tmp_path: Path, disk: Disk):
    rig = make_rig(tmp_path)
    disk.audit = rig.audit_dir
    write(rig.grants, "echo.toml", ECHO)
    witness = Witness(disk)
    rig.broker._runner._backend = witness  # the runner built as brokerd serve builds it
    return rig, witness


async def sessions_calling(rig, calls_each: int) -> list[object]:
    """SESSIONS sessions at once, each making ``calls_each`` calls one after another."""

    async def notice(_waiting) -> None:
        pass

    async def session(name: str) -> list[object]:
        outcomes = []
        for call in range(1, calls_each + 1):
            try:
                outcomes.append(await rig.broker.call(
                    request("echo", '{"text": "hi"}', call=call, session=name), notice))
            except AuditError as exc:
                outcomes.append(exc)
        return outcomes

    done = await asyncio.gather(*(session(f"s{n:02d}") for n in range(SESSIONS)))
    return [outcome for each in done for outcome in each]


def test_records_appended_together_share_fsyncs_and_form_one_chain(tmp_path, disk):
    log, disk.audit = AuditLog(tmp_path, rotate_bytes=16 * 1024), tmp_path

    async def session(name: str) -> None:
        for call in range(4):
            await log.decision(decision=denial(name, call))

    async def main() -> None:
        await asyncio.gather(*(session(f"s{n:02d}") for n in range(SESSIONS)))

    asyncio.run(main())
    records = SESSIONS * 4
    bad, head = verify(tmp_path)
    assert bad == [] and head.count == records and head == log.head
    assert log.fsyncs == disk.calls  # the log counts every fsync it makes
    assert disk.calls < records, f"{disk.calls} fsyncs for {records} records"
    # One order: seq follows the files, and each session's calls are in the order it made them.
    written = list(entries(tmp_path))
    assert [e.seq for e in written] == list(range(1, records + 1))
    for n in range(SESSIONS):
        assert [e.decision.call for e in written if e.decision.session == f"s{n:02d}"] == [
            0, 1, 2, 3]


def test_one_record_at_a_time_is_one_fsync_each(tmp_path, disk):
    log, disk.audit = AuditLog(tmp_path), tmp_path

    async def main() -> None:
        for call in range(5):
            await log.decision(decision=denial("s1", call))

    asyncio.run(main())
    assert disk.calls == 5 + 1  # and the directory's, for the file it created


def test_under_concurrency_every_call_runs_only_after_its_record_is_durable(tmp_path, disk):
    rig, witness = witnessed_rig(tmp_path, disk)
    outcomes = asyncio.run(sessions_calling(rig, calls_each=3))
    assert [o.status for o in outcomes] == ["ok"] * SESSIONS * 3
    assert len(witness.ran) == SESSIONS * 3 and witness.unrecorded == []
    bad, head = verify(rig.audit_dir)
    assert bad == [] and head.count == SESSIONS * 3 * 2  # a decision and a result per call
    assert disk.calls < head.count


@pytest.mark.parametrize("fail_at", [1, 2, 5, 9])
def test_a_failed_fsync_leaves_no_call_run_without_its_durable_record(tmp_path, disk, fail_at):
    disk.fail_at = fail_at
    rig, witness = witnessed_rig(tmp_path, disk)
    outcomes = asyncio.run(sessions_calling(rig, calls_each=2))
    refused = [o for o in outcomes if isinstance(o, AuditError)]
    assert refused and all("audit log cannot be written" in str(o) for o in refused)
    assert witness.unrecorded == []
    # What survives the crash is the durable part: every call that ran has its record there.
    durable = {(e.decision.session, e.decision.call) for e in disk.records()
               if e.kind == "decision" and e.decision.verdict == "allow"}
    assert set(witness.ran) <= durable
    assert verify(rig.audit_dir)[0] == []


def test_after_a_failed_batch_the_chain_goes_on_from_what_the_disk_holds(tmp_path, disk):
    log, disk.audit = AuditLog(tmp_path), tmp_path

    async def main() -> list[object]:
        await log.decision(decision=denial("s1", 1))
        disk.fail_at = disk.calls + 1
        tried = await asyncio.gather(*(log.decision(decision=denial("s2", call))
                                       for call in range(3)), return_exceptions=True)
        disk.fail_at = None
        await log.decision(decision=denial("s3", 1))
        return tried

    assert all(isinstance(each, AuditError) for each in asyncio.run(main()))
    bad, head = verify(tmp_path)
    assert bad == [] and head == log.head
    assert [e.decision.session for e in entries(tmp_path)][-1] == "s3"


def test_a_caller_that_goes_away_leaves_its_record_in_the_batch_and_later_ones_follow(
        tmp_path, disk):
    """brokerd stopping cancels the calls waiting for their records; a call's "caller went
    away" record comes after. The records already appended are still written, and the later
    record joins the chain after them, in the same batch."""
    log, disk.audit = AuditLog(tmp_path), tmp_path

    async def main() -> None:
        first = [asyncio.ensure_future(log.decision(decision=denial("s1", call)))
                 for call in range(3)]
        await asyncio.sleep(0)  # each stages its record; the batch is not written yet
        for each in first:
            each.cancel()
        assert (await log.decision(decision=denial("s2", 1))).seq == 4
        await asyncio.gather(*first, return_exceptions=True)
        assert all(each.cancelled() for each in first)

    asyncio.run(main())
    bad, head = verify(tmp_path)
    assert bad == [] and head.count == 4 and head == log.head
    assert [e.decision.session for e in entries(tmp_path)] == ["s1", "s1", "s1", "s2"]
    assert disk.calls == 1 + 1  # one batch, and the directory's for the file it created
