"""bxcore.logs: a log record becomes one entry of journald's native protocol with the record's
fields, read back by a parser written from the protocol's description
(systemd.io/JOURNAL_NATIVE_PROTOCOL); a role under systemd sends it, one outside logs its lines
as before; an entry too large for a datagram goes as a sealed memfd; a journal that cannot be
reached is said once and nothing is lost. journald itself reads these entries in the boot test
(tests/appliance/test_boot.py)."""

from __future__ import annotations

import array
import fcntl
import logging
import os
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.logs import encode_entry, fields, journal_entry, log_target, priority
from hypothesis import given
from hypothesis import strategies as st

WAIT = 120.0


def parse_native(data: bytes) -> dict[str, bytes]:
    """journald's reading of one datagram: ``NAME=value\\n``, or ``NAME\\n`` + a 64-bit
    little-endian length + that many bytes + ``\\n``."""
    found: dict[str, bytes] = {}
    at = 0
    while at < len(data):
        end = data.index(b"\n", at)
        line = data[at:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            at = end + 1
        else:
            name = line
            (size,) = struct.unpack("<Q", data[end + 1:end + 9])
            value = data[end + 9:end + 9 + size]
            assert data[end + 9 + size:end + 10 + size] == b"\n", "no newline after a value"
            at = end + 10 + size
        assert name.decode() not in found, f"{name!r} twice"
        found[name.decode()] = value
    return found


texts = st.text(st.characters(codec="utf-8"), max_size=300)
names = st.from_regex(r"[a-z][a-z0-9_.]{0,20}", fullmatch=True)


@st.composite
def records(draw: st.DrawFn) -> logging.LogRecord:
    given_fields = draw(st.fixed_dictionaries({}, optional={
        "session": texts, "call": st.integers(0, 2**40), "tool": texts, "verdict": texts,
        "grant": texts, "epoch": st.integers(0, 10**6), "approval": texts}))
    record = logging.LogRecord(
        name=draw(names), level=draw(st.sampled_from([5, 10, 20, 25, 30, 40, 50, 60])),
        pathname=draw(texts), lineno=draw(st.integers(0, 10**6)), msg="%s",
        args=(draw(texts),), exc_info=None, func=draw(texts),
    )
    for key, value in fields(**given_fields).items():
        setattr(record, key, value)
    return record


@given(record=records(), role=names)
def test_every_record_is_one_entry_whose_fields_read_back_exactly(record, role):
    entry = journal_entry(record, role)
    read = parse_native(encode_entry(entry))
    assert read == {name: value.encode() for name, value in entry.items()}
    assert read["MESSAGE"] == record.getMessage().encode()
    assert read["PRIORITY"] == str(priority(record.levelno)).encode()
    assert read["SYSLOG_IDENTIFIER"] == read["BOXMAKER_ROLE"] == role.encode()
    given_fields = record.boxmaker_fields  # type: ignore[attr-defined]
    assert {n: v for n, v in read.items() if n.startswith("BOXMAKER_")} == {
        "BOXMAKER_ROLE": role.encode(), "BOXMAKER_LOGGER": record.name.encode(),
        **{f"BOXMAKER_{n}": str(v).encode() for n, v in given_fields.items()}}


@given(level=st.integers(0, 100))
def test_a_more_severe_level_never_gets_a_less_severe_priority(level):
    assert priority(level) >= priority(level + 1)
    assert priority(logging.ERROR) == 3 and priority(logging.INFO) == 6


def test_a_traceback_is_part_of_the_message():
    try:
        raise ValueError("the cause")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", (), sys.exc_info())
    message = parse_native(encode_entry(journal_entry(record, "loopd")))["MESSAGE"].decode()
    assert message.startswith("failed\nTraceback") and "ValueError: the cause" in message


@given(variable=st.sampled_from([None, "journal", "stderr", "yes"]),
       stream=st.sampled_from([None, "ours", "other", "junk"]))
def test_the_journal_is_chosen_by_the_flag_or_by_a_journal_stream_that_is_our_stderr(
    variable, stream
):
    ours = os.stat(sys.executable)
    environ = {} if variable is None else {"BOXMAKER_LOG": variable}
    if stream is not None:
        environ["JOURNAL_STREAM"] = {"ours": f"{ours.st_dev}:{ours.st_ino}",
                                     "other": f"{ours.st_dev}:{ours.st_ino + 1}",
                                     "junk": "x:y"}[stream]
    expected = {"journal": "journal", "stderr": "stderr", "yes": None}.get(
        variable or "", "journal" if stream == "ours" else "stderr")
    assert log_target(environ, ours) == expected


# --- a role's process logging, with a real datagram socket where journald's would be ----------

CHILD = """
import logging, sys
from pathlib import Path
from bxcore.logs import configure_logging, fields
target = configure_logging("brokerd", format="brokerd: %(message)s", journal=Path(sys.argv[1]))
print(target, flush=True)
logging.getLogger("brokerd.calls").info("call %s/%d: %s", "s-1", 7, sys.stdin.read(),
    extra=fields(session="s-1", call=7, tool="fs.read", verdict="allow"))
"""


@pytest.fixture
def journal() -> Iterator[tuple[Path, socket.socket]]:
    directory = Path(tempfile.mkdtemp(prefix="bx-journal-"))
    path = directory / "socket"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(WAIT)
    yield path, sock
    sock.close()
    path.unlink(missing_ok=True)
    directory.rmdir()


def role_process(path: Path, message: str, env: dict[str, str], stderr: int | None = None
                 ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("BOXMAKER_LOG", "JOURNAL_STREAM")}
    return subprocess.run([sys.executable, "-c", CHILD, str(path)], text=True, input=message,
                          env=environ | env, capture_output=stderr is None, stderr=stderr,
                          stdout=subprocess.PIPE if stderr is not None else None,
                          timeout=WAIT, check=True)


def received(sock: socket.socket) -> dict[str, bytes]:
    """One entry as journald reads it: the datagram, or the sealed memfd it carries."""
    data, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(4))
    if not ancillary:
        return parse_native(data)
    assert data == b""
    (level, kind, payload), = ancillary
    assert (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS)
    fd = array.array("i", payload)[0]
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        wanted = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
        assert seals & wanted == wanted, f"seals {seals:#x}"
        return parse_native(os.pread(fd, os.fstat(fd).st_size, 0))  # as journald maps it
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", [10, 100_000, 400_000])  # the last two exceed a datagram
def test_a_role_under_systemd_sends_its_record_with_the_fields(journal, size):
    path, sock = journal
    message = ("line one\nline two " * size)[:size]
    done = role_process(path, message, {"BOXMAKER_LOG": "journal"})
    assert done.stdout.strip() == "journal", done.stderr
    entry = received(sock)
    assert entry["MESSAGE"] == f"call s-1/7: {message}".encode()
    assert {k: entry[k] for k in ("SYSLOG_IDENTIFIER", "BOXMAKER_SESSION", "BOXMAKER_CALL",
                                  "BOXMAKER_TOOL", "BOXMAKER_VERDICT", "PRIORITY")} == {
        "SYSLOG_IDENTIFIER": b"brokerd", "BOXMAKER_SESSION": b"s-1", "BOXMAKER_CALL": b"7",
        "BOXMAKER_TOOL": b"fs.read", "BOXMAKER_VERDICT": b"allow", "PRIORITY": b"6"}
    assert done.stderr == ""


def test_journal_stream_naming_our_stderr_selects_the_journal(journal, tmp_path):
    path, sock = journal
    with (tmp_path / "stderr").open("w+") as stderr:
        info = os.fstat(stderr.fileno())
        done = role_process(path, "hi", {"JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"},
                            stderr=stderr.fileno())
    assert done.stdout.strip() == "journal"
    assert received(sock)["BOXMAKER_SESSION"] == b"s-1"


def test_outside_systemd_the_lines_are_as_before(journal):
    path, _ = journal
    done = role_process(path, "hi", {})
    assert (done.stdout.strip(), done.stderr) == ("stderr", "brokerd: call s-1/7: hi\n")


def test_a_journal_that_cannot_be_reached_is_named_and_nothing_is_lost(tmp_path):
    missing = tmp_path / "no-journal"
    done = role_process(missing, "kept", {"BOXMAKER_LOG": "journal"})
    assert done.stdout.strip() == "stderr"
    assert done.stderr.splitlines() == [
        f"brokerd: systemd's journal was asked for, but {missing} cannot be used (No such file "
        "or directory): logging to stderr, without the journal's BOXMAKER_* fields",
        "brokerd: call s-1/7: kept"]


def test_a_record_journald_no_longer_takes_goes_to_stderr(journal):
    """journald went away after the role started: the record is written as a line instead."""
    path, _ = journal
    late = CHILD.replace('print(target, flush=True)', 'print(target, flush=True)\n'
                         'import os; os.unlink(sys.argv[1])')
    environ = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    done = subprocess.run([sys.executable, "-c", late, str(path)], text=True, input="after",
                          env=environ | {"BOXMAKER_LOG": "journal"}, capture_output=True,
                          timeout=WAIT, check=True)
    assert (done.stdout.strip(), done.stderr) == ("journal", "brokerd: call s-1/7: after\n")
