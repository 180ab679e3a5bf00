"""The record survives anything a model puts in it (issue 31, attack 9).

Properties, against the real AuditLog on a real directory:
- every string of every record kind, of any size up to megabytes and any text, is kept whole
  when it fits FIELD_BYTES and otherwise cut to a prefix of it plus the marker of the whole;
  every line is within RECORD_BYTES; the chain verifies; the log opens again (a restart) on
  the same head;
- the head is found however long the last record is (a log written before the bounds, whose
  last record is far over 64 KiB), and the chain goes on from it;
- every record kind passes verify's fast check (a kind it did not know would be counted short).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from brokerd.audit import AuditLog, entries, log_files, verify
from brokerd.audit.bounds import FIELD_BYTES, RECORD_BYTES, bound_text, marker
from brokerd.audit.records import GENESIS, DecisionEntry, line_of
from brokerd.audit.verify import check
from bxcore.canonical import canonical_json
from bxcore.tools import DecisionRecord
from bxcore.util import sha256
from faults.profile import by_profile
from hypothesis import given, settings
from hypothesis import strategies as st

# Any text, repeated up to about two megabytes: a short alphabet of the troublesome (quotes,
# backslashes, controls that JSON escapes six-fold, astral characters, a fake marker, lone
# surrogates) as well as arbitrary Unicode.
PIECES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(['"', "\\", "\x01", "\U0001f600", "é", "\ud800",
                     "…[cut: 5 bytes, sha256:" + "0" * 64 + "]"]),
)
BIG = st.builds(lambda piece, times: piece * times, PIECES,
                st.one_of(st.integers(0, 200), st.integers(1_000, 70_000)))
MARKED = re.compile(r"…\[cut: ([0-9]+) bytes, (sha256:[0-9a-f]{64})\]\Z")


def denial(session: str = "s1", call: int = 1, tool: str = "fs.read", reason: str = "no grant",
           grant: str | None = None) -> DecisionRecord:
    return DecisionRecord(session=session, call=call, tool=tool,
                          arguments_sha256=sha256(b"{}"), verdict="deny", grant=grant,
                          reason=reason)


def check_bounded(original: str, kept: str) -> None:
    """``kept`` is ``original``, or a prefix of it with the marker of the whole after it."""
    cut = MARKED.search(kept)
    if cut is None:
        assert kept == original
        return
    whole = original.encode("utf-8", "surrogatepass")
    assert (int(cut[1]), cut[2]) == (len(whole), sha256(whole))
    prefix = kept[:cut.start()]
    fixed = re.sub("[\ud800-\udfff]", "\ufffd", original)
    assert fixed.startswith(prefix)
    assert len(canonical_json(kept)) <= FIELD_BYTES


async def append_every_kind(log: AuditLog, texts: list[str]) -> None:
    a, b, c, d = texts
    await log.decision(decision=denial(tool=a, reason=b, grant=c), approval=d, by=a)
    await log.refused(reason=a, session=b, tool=c, call=7)
    await log.result(session="s1", call=1, tool=d, status="ok", untrusted=True,
                     truncated=False, content_sha256=sha256(b""), **{"class": "public"})
    await log.label(path=a, was_class="secret", was_untrusted=True, untrusted=False, by=b,
                    **{"class": "public"})


@settings(max_examples=by_profile(25, 2_000))
@given(texts=st.lists(BIG, min_size=4, max_size=4))
def test_records_of_any_size_are_bounded_chain_and_reopen(tmp_path_factory, texts):
    directory = tmp_path_factory.mktemp("audit")
    log = AuditLog(directory, rotate_bytes=256 * 1024)
    asyncio.run(append_every_kind(log, texts))
    for path in log_files(directory):
        for line in path.read_bytes().splitlines(keepends=True):
            assert len(line) <= RECORD_BYTES
    decision, refused, result, label = entries(directory)
    a, b, c, d = texts
    for original, kept in ((a, decision.decision.tool), (b, decision.decision.reason),
                           (c, decision.decision.grant), (d, decision.approval),
                           (a, refused.reason), (b, refused.session), (c, refused.tool),
                           (d, result.tool), (a, label.path), (b, label.by)):
        check_bounded(original, kept)
    bad, head = verify(directory)
    assert bad == [] and head == log.head and head.count == 4
    assert AuditLog(directory).head == head  # brokerd restarts on it


@given(text=BIG)
def test_bound_text_is_a_prefix_and_the_marker_of_the_whole(text):
    check_bounded(text, bound_text(text))


def test_a_marker_in_a_record_is_always_one_brokerd_wrote(tmp_path):
    fake = "short" + marker("something else")
    kept = bound_text(fake)
    assert kept != fake and kept.endswith(marker(fake))
    log = AuditLog(tmp_path)
    asyncio.run(log.decision(decision=denial(reason=fake)))  # a short record, too
    (written,) = entries(tmp_path)
    assert written.decision.reason == kept


def test_the_head_is_found_however_long_the_last_record_is(tmp_path):
    """A log written before the bounds: its last record is a 200,000-character reason (the
    70,000-character host of the attack, and more). The log opens on it and chains on."""
    records = [denial(call=1), denial(call=2, reason="host " + "a" * 200_000 + " not granted")]
    previous, data = GENESIS, b""
    for seq, record in enumerate(records, start=1):
        line, previous = line_of(DecisionEntry(seq=seq, time="2026-12-03T00:00:00.000000Z",
                                               prev=previous, decision=record))
        data += line
    (tmp_path / "00000001.jsonl").write_bytes(data)
    assert len(data.splitlines()[-1]) > 3 * 64 * 1024

    log = AuditLog(tmp_path)
    assert log.head == verify(tmp_path)[1] and log.head.count == 2
    asyncio.run(log.decision(decision=denial(call=3)))
    bad, head = verify(tmp_path)
    assert bad == [] and head.count == 3 and AuditLog(tmp_path).head == head


def test_every_record_kind_passes_the_fast_check(tmp_path):
    """Each kind is written (a repaired one by tearing the end) and the fast check, not the
    slow diagnosis, counts every record."""
    log = AuditLog(tmp_path)
    asyncio.run(append_every_kind(log, ["a", "b", "c", "d"]))
    path = log_files(tmp_path)[-1]
    path.write_bytes(path.read_bytes() + b'{"torn')
    reopened = AuditLog(tmp_path)
    assert {e.kind for e in entries(tmp_path)} == {"decision", "refused", "result", "label",
                                                   "repaired"}
    whole, head = check(p.read_bytes() for p in log_files(tmp_path))
    assert whole and head == reopened.head and head.count == 5


def test_the_free_space_check_refuses_only_calls_that_write_to_the_logs_filesystem(tmp_path):
    from brokerd.errors import AuditError

    log = AuditLog(tmp_path / "audit", reserve_bytes=2**62)  # more than any disk has
    elsewhere = Path("/proc")  # never the log's filesystem
    log.check_room([elsewhere])
    log.check_room([])
    try:
        log.check_room([tmp_path])
    except AuditError as exc:
        assert "audit_reserve_bytes" in str(exc) and str(tmp_path) not in str(exc)
    else:
        raise AssertionError("a call writing to the log's filesystem was not refused")
    AuditLog(tmp_path / "audit2", reserve_bytes=0).check_room([tmp_path])
