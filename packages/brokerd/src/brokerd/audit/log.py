"""The audit log on disk: ``<home>/audit/NNNNNNNN.jsonl``, append-only, group-committed.

A record joins the chain (its seq and ``prev``) the moment it is appended, in the order the
appends are made, and its append returns once the record is on disk and fsynced. The first
record of a batch schedules the write for the event loop's next turn, so the records every task
that is ready appends first join it; the write and its fsync then run on the event loop itself
(docs/decisions/audit-group-commit-on-the-loop.md). Under many concurrent sessions the fsyncs
are fewer than the records, and no caller goes on before its own record is durable.

A file is rotated when the next record would take it past ``rotate_bytes``; the new file's first
record points at the old file's last, so the chain runs on. On open the log finds its head (the
last record's seq and hash) by reading the newest file backwards to the newline before its last
line (``find_tail``), however long that record is. Every string of a record is bounded first
(audit.bounds), so a record has a known maximum size whatever a model put in it.

A write or fsync that fails (ENOSPC, EIO) fails its batch and every record after it, and the
files are cut back to their length before the batch: the log never keeps a torn line or a
record no caller was told is durable, and the next append, once the disk takes it, goes on
from the last durable record with no restart. A torn end found at start-up (a crash in the
middle of a write) is kept beside the log, cut off, and recorded (a ``repaired`` record).
docs/decisions/audit-log-bounds.md says why.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from bxcore.util import fsync_dir, now_rfc3339, sha256, write_all, write_durably
from pydantic import ValidationError

from ..errors import AuditError
from .bounds import RECORD_BYTES, bounded, needs_bounding
from .opencalls import Change, Key, OpenCall, apply, change_of, still_open, write_checkpoint
from .records import (
    GENESIS,
    DecisionEntry,
    Entry,
    LabelEntry,
    RefusedEntry,
    RepairedEntry,
    ResultEntry,
    line_of,
    parse_line,
)
from .space import WRITER, HeldRoom, refuse_when_low
from .verify import BadLink, Head, Line, check, diagnose

log = logging.getLogger("brokerd.audit")

_FILE = re.compile(r"\d{8}\.jsonl")
E = TypeVar("E", DecisionEntry, ResultEntry, RefusedEntry, LabelEntry)


def log_files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if _FILE.fullmatch(p.name))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise AuditError(f"{directory}: cannot list: {exc.strerror}") from None


def read_lines(directory: Path, *, newest_only: bool = False) -> Iterator[Line]:
    files = log_files(directory)
    for path in files[-1:] if newest_only else files:
        try:
            with path.open("rb") as handle:
                for number, raw in enumerate(handle, start=1):
                    yield path.name, number, raw.rstrip(b"\n")
        except OSError as exc:
            raise AuditError(f"{path}: cannot read: {exc.strerror}") from None


def read_files(directory: Path) -> Iterator[bytes]:
    """Each log file's bytes, oldest first (a file is at most ``rotate_bytes`` long)."""
    for path in log_files(directory):
        try:
            yield path.read_bytes()
        except OSError as exc:
            raise AuditError(f"{path}: cannot read: {exc.strerror}") from None


def verify(directory: Path) -> tuple[list[BadLink], Head]:
    """Every BadLink in the log (none for a whole chain), and its head."""
    whole, head = check(read_files(directory))
    return ([] if whole else diagnose(read_lines(directory))), head


def entries(
    directory: Path, *, newest_only: bool = False
) -> Iterator[Entry]:
    """Every record in log order (``newest_only``: of the file being appended to); AuditError
    names the first line that is not a record."""
    for file, number, raw in read_lines(directory, newest_only=newest_only):
        try:
            entry, _ = parse_line(raw)
        except ValueError as exc:
            raise AuditError(f"{directory / file}:{number}: not an audit record: "
                             f"{_first_problem(exc)}") from None
        yield entry


# --- where the log ends ----------------------------------------------------------------------

CHUNK = 64 * 1024  # read backwards this much at a time


@dataclass(frozen=True)
class End:
    """The durable end of the log: the file appended to, its length up to the last newline,
    and the last record's seq and hash (0 and GENESIS for an empty log)."""

    path: Path
    size: int
    seq: int
    head: str


@dataclass(frozen=True)
class Tail:
    """What follows a file's last newline: ``torn`` bytes that end no line (a write cut short
    by a crash), to be cut back to ``end.size``."""

    end: End
    torn: bytes


def _last_lines(path: Path) -> tuple[bytes | None, int, bytes]:
    """The file's last complete line (None when it has none), the length up to and including
    its newline, and the bytes after that newline."""
    try:
        with path.open("rb") as handle:
            position = handle.seek(0, os.SEEK_END)
            pieces: list[bytes] = []
            newlines: list[int] = []  # offsets in the file, the last one first
            while position > 0 and len(newlines) < 2:
                step = min(CHUNK, position)
                position -= step
                handle.seek(position)
                piece = handle.read(step)
                pieces.append(piece)
                at = len(piece)
                while len(newlines) < 2 and (at := piece.rfind(b"\n", 0, at)) >= 0:
                    newlines.append(position + at)
    except OSError as exc:
        raise AuditError(f"{path}: cannot read: {exc.strerror}") from None
    data = b"".join(reversed(pieces))  # the file from ``position`` to its end
    if not newlines:
        return None, 0, data
    start = newlines[1] + 1 if len(newlines) > 1 else 0
    return (data[start - position:newlines[0] - position], newlines[0] + 1,
            data[newlines[0] + 1 - position:])


def find_tail(files: list[Path], directory: Path) -> Tail:
    """The log's end, from the newest file back to the first that holds a record, found by
    reading each backwards from its end until the newline before its last line: start-up costs
    the length of the last record, however long that is, not the length of the log. Torn bytes
    are those of the newest file that has any bytes; a last complete line that is not a record
    or does not match its hash is refused (that is not a torn write)."""
    newest = files[-1] if files else directory / f"{1:08d}.jsonl"
    torn: bytes | None = None
    size = 0
    for path in reversed(files):
        line, length, after = _last_lines(path)
        if torn is None and (line is not None or after):
            newest, size, torn = path, length, after
        if line is None:
            continue
        try:
            entry, stored = parse_line(line)
        except ValueError:
            raise AuditError(f"{path}: the last line is not an audit record; run "
                             "'brokerd audit verify'") from None
        if line_of(entry)[1] != stored:
            raise AuditError(f"{path}: the last record (seq {entry.seq}) does not match "
                             "its hash; run 'brokerd audit verify'")
        return Tail(End(newest, size, entry.seq, stored), torn or b"")
    return Tail(End(newest, size, 0, GENESIS), torn or b"")


# --- appending -------------------------------------------------------------------------------


class _Pending(NamedTuple):
    line: bytes
    durable: asyncio.Future[None]
    seq: int
    digest: str
    change: Change | None  # how it changes the open calls (audit.opencalls)


class AuditLog:
    """Appends records; the only writer of the audit directory. ``fsyncs`` counts the fsyncs
    made (files and the directory), so a test or a benchmark can set them against records.

    ``reserve_bytes``, ``reserve_inodes``: a call that can write to the audit directory's
    filesystem is not run while less than these are free there (``check_room``), and the log
    holds room of its own there for when a tool fills it anyway (audit.space.HeldRoom). 0:
    neither."""

    def __init__(self, directory: Path, *, rotate_bytes: int = 64 * 1024 * 1024,
                 reserve_bytes: int = 0, reserve_inodes: int = 0,
                 clock: Callable[[], str] = now_rfc3339):
        self.directory = directory
        self._rotate = rotate_bytes
        self._reserve = reserve_bytes
        self._reserve_inodes = reserve_inodes
        self._clock = clock
        self.fsyncs = 0
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        tail = find_tail(log_files(directory), directory)
        self._end = tail.end  # what is on disk and fsynced
        self._path = tail.end.path
        self._seq, self._head = tail.end.seq, tail.end.head
        self._torn: list[tuple[Path, int]] = []  # files to cut back to a length before writing
        self._pending: list[_Pending] = []
        self._room = HeldRoom(directory, reserve_bytes, reserve_inodes)
        self._durable_open: dict[Key, OpenCall] = {}  # as on disk
        if tail.torn:
            self._repair(tail)
        newest = log_files(directory)[-1:]
        records = list(entries(directory, newest_only=True))
        self._durable_open = still_open(newest[0] if newest else None, records)
        self._open = dict(self._durable_open)  # as chained, pending records included
        # Every (session, call) decided in the newest file or open before it, and claimed in
        # this life: a request naming one again is refused (``claim``).
        self._claimed: set[Key] = set(self._open) | {
            (e.decision.session, e.decision.call) for e in records
            if isinstance(e, DecisionEntry)}
        self.unfinished = tuple(self._open.values())  # allowed, no result: a previous life's
        self._room.hold()

    @property
    def head(self) -> Head:
        return Head(self._seq, self._head)

    async def flush(self) -> None:
        """Return once every record appended so far is on disk (or has failed)."""
        self._write_pending()

    def open_calls(self) -> list[OpenCall]:
        """The calls with an allowing decision and no result yet (audit.opencalls)."""
        return list(self._open.values())

    def claim(self, session: str, call: int) -> bool:
        """Take (``session``, ``call``) for one request: False when it was taken before (a call
        decided in the newest file, open before it, or claimed in this life), so that one
        number never has two decisions, nor one result close two calls. Synchronous: two
        requests racing cannot both take it."""
        if (session, call) in self._claimed:
            return False
        self._claimed.add((session, call))
        return True

    def check_room(self, writable: Iterable[Path], *, needed: int = 0,
                   what: str = WRITER) -> None:
        """Raise AuditError when a call that can write through one of ``writable`` (host paths)
        would write to the filesystem of the audit log with less than the reserves (bytes, and
        inodes) free there, ``needed`` bytes of its own write beside them: the call is refused
        before it runs, so that a tool cannot take the log's last bytes or inodes."""
        refuse_when_low(self.directory, writable, self._reserve, self._reserve_inodes,
                        needed=needed, what=what)

    async def decision(self, **fields: Any) -> DecisionEntry:
        return await self._append(DecisionEntry, fields)

    async def result(self, **fields: Any) -> ResultEntry:
        return await self._append(ResultEntry, fields)

    async def refused(self, **fields: Any) -> RefusedEntry:
        return await self._append(RefusedEntry, fields)

    async def label(self, **fields: Any) -> LabelEntry:
        return await self._append(LabelEntry, fields)

    def _chain(self, kind: type[Entry], fields: dict[str, Any]) -> tuple[Entry, bytes, str]:
        """The next record, its strings bounded (audit.bounds), its line and hash. Raises
        AuditError, before it joins the chain, for a record that would still be too long."""
        entry: Entry = kind.model_validate(
            {**fields, "seq": self._seq + 1, "prev": self._head, "time": self._clock()})
        try:
            line, digest = line_of(entry)
        except ValueError:  # a lone surrogate, which bounding replaces
            line = b""
        if not line or needs_bounding(line):
            entry = bounded(entry)
            line, digest = line_of(entry)
        if len(line) > RECORD_BYTES:
            raise AuditError(f"a {entry.kind} record of {len(line)} bytes is over the "
                             f"{RECORD_BYTES}-byte bound of a record; not written")
        return entry, line, digest

    async def _append(self, kind: type[E], fields: dict[str, Any]) -> E:
        entry, line, digest = self._chain(kind, fields)
        assert isinstance(entry, kind)
        self._seq, self._head = entry.seq, digest
        change = change_of(entry)
        apply(self._open, change)
        loop = asyncio.get_running_loop()
        durable = loop.create_future()
        if not self._pending:  # the first of a batch: what the ready tasks append joins it
            loop.call_soon(self._write_pending)
        self._pending.append(_Pending(line, durable, entry.seq, digest, change))
        # Shielded: a caller that goes away does not take its record out of the batch.
        await asyncio.shield(durable)
        return entry

    def _write_pending(self) -> None:
        """Write and fsync what is pending as one batch: each record durable, or, whatever the
        exception (no caller may wait for ever), all of them failed, and the chain goes on from
        the last durable record, where the files were cut back to (or will be, before the next
        write: see ``_cut_back``)."""
        batch, self._pending = self._pending, []
        if not batch:  # flushed already
            return
        try:
            self._write([p.line for p in batch], (batch[-1].seq, batch[-1].digest),
                        [p.change for p in batch])
        except Exception as exc:  # each waiting caller is told
            failure = exc if isinstance(exc, AuditError) else AuditError(
                f"the audit log cannot be written ({exc!r}): no call runs until it can be")
            for pending in batch:
                pending.durable.set_exception(failure)
            self._path, self._seq, self._head = self._end.path, self._end.seq, self._end.head
            self._open = dict(self._durable_open)
            return
        for pending in batch:
            pending.durable.set_result(None)

    def _write(self, lines: list[bytes], last: tuple[int, str],
               changes: list[Change | None]) -> None:
        """Append ``lines`` in order (``last``: the seq and hash of the last one; ``changes``:
        how each changes the open calls), rotating as each needs, with one fsync per file
        written (and one of the directory when a file was created); a new file's checkpoint of
        the open calls is durable before its first record (audit.opencalls). Runs in a worker
        thread.
        On any failure every file is cut back to its length before the batch, so the log
        never keeps a torn or unacknowledged line, and AuditError says why."""
        self._cut_back()
        touched: list[tuple[Path, int]] = []
        calls = dict(self._durable_open)
        try:
            size = _size(self._path)
            created, chunk = size == 0, list[bytes]()
            touched.append((self._path, size))
            for line, change in zip(lines, changes, strict=True):
                if size and size + len(line) > self._rotate:
                    self._write_file(b"".join(chunk), created)
                    self._path = self._path.with_name(f"{int(self._path.stem) + 1:08d}.jsonl")
                    created, chunk, size = True, [], 0
                    touched.append((self._path, 0))
                    write_checkpoint(self._path, calls)
                    self.fsyncs += 2  # the checkpoint and its directory
                chunk.append(line)
                apply(calls, change)
                size += len(line)
            self._write_file(b"".join(chunk), created)
        except OSError as exc:
            log.error("%s: cannot append: %s; the batch is cut back", self._path, exc.strerror)
            self._torn = touched
            self._cut_back(quietly=True)
            if exc.errno == errno.ENOSPC and not self._torn and self._room.release():
                self._write(lines, last, changes)  # once: the room is gone now
                return
            raise AuditError(f"the audit log cannot be written ({exc.strerror}): no call runs "
                             "until it can be") from None
        self._end = End(self._path, size, *last)
        self._durable_open = calls
        self._room.after_write()  # freed on a full disk, held again once there is room

    def _cut_back(self, *, quietly: bool = False) -> None:
        """Cut each file a failed write touched back to its length before it, and fsync it.
        What cannot be cut now is cut before the next write; until then nothing is written
        (``quietly``: leave that to the next write instead of raising)."""
        while self._torn:
            path, size = self._torn[-1]
            try:
                if _size(path) > size:
                    os.truncate(path, size)
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            except OSError as exc:
                if quietly:
                    return
                raise AuditError(f"the audit log cannot be written (cutting back a failed "
                                 f"write: {exc.strerror}): no call runs until it can be") from None
            self._torn.pop()

    def _write_file(self, data: bytes, created: bool) -> None:
        if not data:  # the batch's first record opened a new file
            return
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            write_all(fd, data)
            os.fsync(fd)
            self.fsyncs += 1
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.directory)
            self.fsyncs += 1

    def _repair(self, tail: Tail) -> None:
        """Start-up found bytes after the newest file's last newline: a write a crash cut short,
        never acknowledged (its caller never went on). They are kept beside the log, cut off,
        and a ``repaired`` record saying so is appended, so the chain shows the repair. Raises
        AuditError (brokerd does not start) when that cannot be done, say on a full disk."""
        path, at = tail.end.path, tail.end.size
        kept = path.with_name(f"{path.name}.torn-{at}")
        try:
            write_durably(kept, tail.torn, mode=0o640)
        except OSError as exc:
            raise AuditError(f"{path}: ends in {len(tail.torn)} torn bytes that cannot be kept "
                             f"in {kept.name} ({exc.strerror}); free space and start again"
                             ) from None
        log.warning("%s: %d torn bytes at its end (a write cut short) moved to %s",
                    path, len(tail.torn), kept.name)
        self._torn = [(path, at)]
        entry, line, digest = self._chain(RepairedEntry, {
            "cut_file": path.name, "cut_at": at, "cut_bytes": len(tail.torn),
            "cut_sha256": sha256(tail.torn), "cut_kept": kept.name})
        try:
            self._write([line], (entry.seq, digest), [None])
        except AuditError as exc:
            raise AuditError(f"{path}: cannot repair its torn end: {exc}") from None
        self._seq, self._head = entry.seq, digest


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _first_problem(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"])
    return str(exc)
