"""verify()'s fast path hashes each line as written, without decoding JSON. It must agree with
the definition (every record parsed, its canonical JSON hashed, prev and seq followed) on every
log: honest ones, and any edit, deletion, insertion or re-encoding of one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from brokerd.audit import GENESIS, AuditLog, log_files
from brokerd.audit.log import read_files
from brokerd.audit.verify import check
from bxcore.canonical import canonical_json
from bxcore.tools import DecisionRecord
from bxcore.util import sha256
from hypothesis import given
from hypothesis import strategies as st
from support.scratch import scratch_dir

REASONS = st.text(min_size=0, max_size=40)  # quotes, backslashes, "hash" keys, any Unicode


def definition(files: list[bytes]) -> tuple[bool, int]:
    """The chain rule as records.py states it, record by record (the slow, obvious way)."""
    previous, count = GENESIS, 0
    for data in files:
        # A record ends at "\n" alone (splitlines would also end one at "\r", so a "\r" put
        # before a record's "\n" would pass unseen)
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        for raw in lines:
            try:
                body = json.loads(raw)
            except ValueError:
                return False, count
            if not isinstance(body, dict) or canonical_json(body) != raw:
                return False, count  # not as brokerd writes a record
            rest = {k: v for k, v in body.items() if k != "hash"}
            if (body.get("prev") != previous or body.get("seq") != count + 1
                    or sha256(canonical_json(rest)) != body.get("hash")):
                return False, count
            previous, count = body["hash"], count + 1
    # A last line without its newline is still a whole record: the chain is intact. (A newest
    # file torn mid-record is AuditLog's to refuse when it opens.)
    return True, count


def write(directory: Path, reasons: list[str]) -> list[bytes]:
    log = AuditLog(directory, rotate_bytes=600)

    async def append() -> None:
        for call, reason in enumerate(reasons):  # every kind of record a log holds, in turn
            if call % 3 == 2:
                await log.refused(reason=reason or "the request frame could not be decoded",
                                  session="s1", call=call)
            elif call % 3 == 1:
                await log.decision(decision=DecisionRecord(
                    session="s1", call=call, tool="fs.read", arguments_sha256=sha256(b"{}"),
                    verdict="deny", grant=None, reason=reason or "no grant matches"))
            else:
                await log.result(session="s1", call=call, tool=reason or "fs.read",
                                 status="ok", **{"class": "private"}, untrusted=False,
                                 truncated=False, content_sha256=sha256(reason.encode()))

    asyncio.run(append())
    return list(read_files(directory))


@given(reasons=st.lists(REASONS, min_size=1, max_size=8))
def test_an_honest_log_passes_both(reasons):
    with scratch_dir() as scratch:  # in memory: the appends' fsyncs were most of an example
        files = write(scratch / "audit", reasons)
    whole, head = check(files)
    assert (whole, head.count) == definition(files) == (True, len(reasons))


def test_a_log_of_refused_requests_alone_is_whole_with_every_record_counted(tmp_path):
    directory = tmp_path / "audit"
    write(directory, ["", "", ""])  # decision, result, refused
    log = AuditLog(directory)

    async def refuse_more() -> None:
        for call in range(3):
            await log.refused(reason="not a tool request", call=call)

    asyncio.run(refuse_more())
    whole, head = check(list(read_files(directory)))
    assert (whole, head.count) == (True, 6)


@given(reasons=st.lists(REASONS, min_size=2, max_size=6), data=st.data())
def test_any_change_of_bytes_is_judged_as_the_definition_judges_it(reasons, data):
    with scratch_dir() as scratch:  # in memory: the appends' fsyncs were most of an example
        files = write(scratch / "audit", reasons)
    which = data.draw(st.integers(0, len(files) - 1))
    original = files[which]
    change = data.draw(st.sampled_from(["flip", "delete", "insert", "respace", "duplicate"]))
    at = data.draw(st.integers(0, max(0, len(original) - 1)))
    if change == "flip":
        mutated = original[:at] + bytes([original[at] ^ 0x01]) + original[at + 1:]
    elif change == "delete":
        mutated = original[:at] + original[at + 1:]
    elif change == "insert":
        mutated = original[:at] + data.draw(st.binary(min_size=1, max_size=4)) + original[at:]
    elif change == "respace":  # the same record in a non-canonical form, hash left as it was
        mutated = original.replace(b'":', b'": ', 1)
    else:
        first = original.split(b"\n", 1)[0] + b"\n"
        mutated = original + first
    files[which] = mutated
    whole, head = check(files)
    expected_whole, expected_count = definition(files)
    assert whole == expected_whole
    if not whole:
        assert head.count == expected_count  # both stop at the same record


def test_a_reason_that_spells_a_hash_member_does_not_confuse_the_fast_path(tmp_path):
    forged = ',"hash":"sha256:' + "0" * 64 + '","kind":"result","prev":"' + GENESIS + '","seq":1,'
    files = write(tmp_path, ["x", forged, forged])
    assert check(files)[0] and definition(files)[0]


def test_a_log_that_ends_in_a_torn_line_fails(tmp_path):
    files = write(tmp_path, ["a", "b", "c"])
    files[-1] = files[-1][:-5]
    assert check(files)[0] is False
    assert len(log_files(tmp_path)) >= 1


def test_a_carriage_return_before_a_records_newline_breaks_the_chain(tmp_path):
    """Found by the property above: the definition once split lines as splitlines does, and
    took a record followed by "\r\n" for the record itself."""
    files = write(tmp_path, ["a", "b"])
    end = files[0].index(b"\n")
    files[0] = files[0][:end] + b"\r" + files[0][end:]
    whole, head = check(files)
    assert (whole, head.count) == definition(files) == (False, 0)
