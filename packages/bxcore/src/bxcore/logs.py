"""Every role's logging, set up once: plain lines on stderr by hand, the journal's structured
fields under systemd.

    configure_logging("brokerd", format="%(levelname)s %(name)s: %(message)s")
    log.info("call %s/%d (%s): %s", session, call, tool, verdict,
             extra=fields(session=session, call=call, tool=tool, verdict=verdict))

Under systemd each record goes to journald as one entry of its native protocol: ``MESSAGE``,
``PRIORITY``, ``SYSLOG_IDENTIFIER`` (the role), ``BOXMAKER_ROLE``, ``BOXMAKER_LOGGER`` and the
``CODE_*`` fields, plus ``BOXMAKER_<NAME>`` for each field a log call passes with ``fields``,
so ``journalctl -u boxmaker-brokerd BOXMAKER_SESSION=<id>`` finds one session's story.

"Under systemd" is either of:

- ``BOXMAKER_LOG=journal``: the units pass it into the role's container (podman gives a
  container neither the unit's ``JOURNAL_STREAM`` nor its stderr), with journald's socket
  mounted at its own path;
- ``JOURNAL_STREAM`` naming this process's stderr (systemd's own test, systemd.exec(5)): a
  process systemd started directly, such as a job's ``bxctl``.

``BOXMAKER_LOG=stderr`` forces the lines. Without either, logging is what it always was.

The native protocol (systemd.io/JOURNAL_NATIVE_PROTOCOL) is written here, in pure Python, the
way ``sdnotify`` writes sd_notify: one datagram per entry to ``/run/systemd/journal/socket``;
an entry too large for a datagram goes as a sealed memfd passed over the same socket. Encoding
is pure (``journal_entry``, ``encode_entry``); only ``JournalHandler.emit`` does I/O. A record
journald cannot take (its socket is gone) is written to stderr instead: nothing is lost.
docs/decisions/journal-and-socket-activation.md says why not systemd-python.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import stat
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TextIO

from .util import write_all

JOURNAL_SOCKET = Path("/run/systemd/journal/socket")
TARGET_VARIABLE = "BOXMAKER_LOG"
FIELDS_ATTRIBUTE = "boxmaker_fields"  # the LogRecord attribute ``fields`` puts them on
FIELD_PREFIX = "BOXMAKER_"
# journald's rule for a field name: upper-case letters, digits and "_", not starting with "_"
# (those are its trusted fields), at most 64 bytes.
FIELD_NAME = re.compile(r"[A-Z0-9][A-Z0-9_]{0,63}")
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL

Target = Literal["journal", "stderr"]
Value = str | int

log = logging.getLogger("bxcore.logs")


def fields(*, session: str | None = None, call: int | None = None, tool: str | None = None,
           verdict: str | None = None, grant: str | None = None, epoch: int | None = None,
           approval: str | None = None) -> dict[str, object]:
    """``extra=`` for a log call that knows these; each given one becomes ``BOXMAKER_<NAME>``."""
    given = {"SESSION": session, "CALL": call, "TOOL": tool, "VERDICT": verdict, "GRANT": grant,
             "EPOCH": epoch, "APPROVAL": approval}
    return {FIELDS_ATTRIBUTE: {name: value for name, value in given.items() if value is not None}}


# --- pure: a record as an entry, an entry as bytes --------------------------------------------


def priority(level: int) -> int:
    """The syslog priority journald files a logging level under."""
    for floor, value in ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4),
                         (logging.INFO, 6)):
        if level >= floor:
            return value
    return 7


def message_of(record: logging.LogRecord) -> str:
    """The record's message with its traceback and stack, as a formatter would add them."""
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    if record.stack_info:
        text += "\n" + record.stack_info
    return text


def journal_entry(record: logging.LogRecord, role: str) -> dict[str, str]:
    """The journal fields of one record (names and text; ``encode_entry`` makes the bytes)."""
    entry = {
        "MESSAGE": message_of(record),
        "PRIORITY": str(priority(record.levelno)),
        "SYSLOG_IDENTIFIER": role,
        "BOXMAKER_ROLE": role,
        "BOXMAKER_LOGGER": record.name,
        "CODE_FILE": str(record.pathname),
        "CODE_LINE": str(record.lineno),
        "CODE_FUNC": str(record.funcName or ""),
    }
    given: Mapping[str, Value] = getattr(record, FIELDS_ATTRIBUTE, {})
    for name, value in given.items():
        entry[FIELD_PREFIX + name] = str(value)
    return entry


def encode_entry(entry: Mapping[str, str]) -> bytes:
    """One entry in journald's native format: ``NAME=value\\n``, or, for a value holding a
    newline, ``NAME\\n`` + its length as a little-endian 64-bit integer + the value + ``\\n``.
    Text is UTF-8; a character UTF-8 cannot carry (a lone surrogate) is written escaped."""
    parts: list[bytes] = []
    for name, value in entry.items():
        if not FIELD_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a journal field name")
        data = value.encode("utf-8", "backslashreplace")
        key = name.encode("ascii")
        if b"\n" in data:
            parts.append(key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(key + b"=" + data + b"\n")
    return b"".join(parts)


def log_target(environ: Mapping[str, str], stderr: os.stat_result | None) -> Target | None:
    """Where the process logs: ``BOXMAKER_LOG`` if set (None: a value it does not know), else
    the journal when ``JOURNAL_STREAM`` is the ``device:inode`` of ``stderr``."""
    chosen = environ.get(TARGET_VARIABLE, "")
    if chosen in ("journal", "stderr"):
        return chosen  # type: ignore[return-value]
    if chosen:
        return None
    device, _, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    if stderr is not None and device.isdigit() and inode.isdigit() and \
            (int(device), int(inode)) == (stderr.st_dev, stderr.st_ino):
        return "journal"
    return "stderr"


# --- the shell --------------------------------------------------------------------------------


class JournalHandler(logging.Handler):
    """Sends each record to journald; a record it cannot take goes to ``fallback`` instead."""

    def __init__(self, role: str, fallback: logging.Handler, *,
                 address: Path = JOURNAL_SOCKET, level: int = logging.NOTSET):
        super().__init__(level)
        self.role = role
        self.address = str(address)
        self.fallback = fallback
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = encode_entry(journal_entry(record, self.role))
        except Exception:  # our bug: logging must not raise into the role
            self.handleError(record)
            return
        try:
            self._send(data)
        except OSError:
            self.fallback.handle(record)

    def _send(self, data: bytes) -> None:
        try:
            self._socket.sendto(data, self.address)
        except OSError as exc:
            if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                raise
            self._send_as_memfd(data)  # larger than a datagram: journald reads the memfd

    def _send_as_memfd(self, data: bytes) -> None:
        fd = os.memfd_create("journal-entry", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            write_all(fd, data)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)  # journald takes only a sealed memfd
            rights = array.array("i", [fd])
            self._socket.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)], 0,
                                 self.address)
        finally:
            os.close(fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.close()
        super().close()


def journal_reachable(path: Path = JOURNAL_SOCKET) -> str | None:
    """None when ``path`` is a socket this process may send to; otherwise why not."""
    try:
        info = path.stat()
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISSOCK(info.st_mode):
        return "not a socket"
    if not os.access(path, os.W_OK):
        return "not writable by this process"
    return None


def configure_logging(role: str, *, format: str, level: int | str = logging.INFO,
                      environ: Mapping[str, str] | None = None, stream: TextIO | None = None,
                      journal: Path = JOURNAL_SOCKET) -> Target:
    """The root logger for ``role``'s process; returns where it logs. Outside systemd this is
    ``logging.basicConfig(level=level, format=format)`` on stderr, exactly as before."""
    environ = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    lines = logging.StreamHandler(stream)
    lines.setFormatter(logging.Formatter(format))
    try:
        stderr: os.stat_result | None = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # a stream with no descriptor (tests)
        stderr = None
    target = log_target(environ, stderr)
    refused = journal_reachable(journal) if target == "journal" else None
    if target == "journal" and refused is None:
        logging.basicConfig(level=level, handlers=[JournalHandler(role, lines, address=journal)])
        return "journal"
    logging.basicConfig(level=level, handlers=[lines])
    if target is None:
        log.warning("%s=%r is neither journal nor stderr: logging to stderr", TARGET_VARIABLE,
                    environ[TARGET_VARIABLE])
    elif refused is not None:
        log.warning("systemd's journal was asked for, but %s cannot be used (%s): logging to "
                    "stderr, without the journal's BOXMAKER_* fields", journal, refused)
    return "stderr"


__all__ = [
    "FIELD_PREFIX",
    "JOURNAL_SOCKET",
    "TARGET_VARIABLE",
    "JournalHandler",
    "configure_logging",
    "encode_entry",
    "fields",
    "journal_entry",
    "journal_reachable",
    "log_target",
    "message_of",
    "priority",
]
