"""The audit log on disk: ``<home>/audit/NNNNNNNN.jsonl``, append-only, group-committed.

A record joins the chain (its seq and ``prev``) the moment it is appended, in the order the
appends are made, and its append returns once the record is on disk and fsynced. Records
appended while an fsync runs (a worker thread does the I/O, so the event loop keeps taking them)
are written together after it and share the next fsync: under many concurrent sessions the
fsyncs are fewer than the records, and no caller goes on before its own record is durable.

A file is rotated when the next record would take it past ``rotate_bytes``; the new file's first
record points at the old file's last, so the chain runs on. On open the log finds its head (the
last record's seq and hash) by reading the end of the newest file. A newest file whose last line
is torn (a crash mid-write) is refused, not repaired: ``brokerd audit verify`` names it.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bxcore.util import fsync_dir, now_rfc3339
from pydantic import ValidationError

from ..errors import AuditError
from .records import (
    GENESIS,
    DecisionEntry,
    Entry,
    LabelEntry,
    RefusedEntry,
    ResultEntry,
    line_of,
    parse_line,
)
from .verify import BadLink, Head, Line, check, diagnose

_FILE = re.compile(r"\d{8}\.jsonl")
TAIL_READ = 64 * 1024


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


class AuditLog:
    """Appends records; the only writer of the audit directory. ``fsyncs`` counts the fsyncs
    made (files and the directory), so a test or a benchmark can set them against records."""

    def __init__(self, directory: Path, *, rotate_bytes: int = 64 * 1024 * 1024,
                 clock: Callable[[], str] = now_rfc3339):
        self.directory = directory
        self._rotate = rotate_bytes
        self._clock = clock
        self.fsyncs = 0
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        files = log_files(directory)
        self._path = files[-1] if files else directory / f"{1:08d}.jsonl"
        self._seq, self._head = self._find_head(files)
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._broken: str | None = None

    @property
    def head(self) -> Head:
        return Head(self._seq, self._head)

    async def decision(self, **fields: Any) -> DecisionEntry:
        entry = await self._append(DecisionEntry, fields)
        assert isinstance(entry, DecisionEntry)
        return entry

    async def result(self, **fields: Any) -> ResultEntry:
        entry = await self._append(ResultEntry, fields)
        assert isinstance(entry, ResultEntry)
        return entry

    async def refused(self, **fields: Any) -> RefusedEntry:
        entry = await self._append(RefusedEntry, fields)
        assert isinstance(entry, RefusedEntry)
        return entry

    async def label(self, **fields: Any) -> LabelEntry:
        entry = await self._append(LabelEntry, fields)
        assert isinstance(entry, LabelEntry)
        return entry

    async def _append(self, kind: type[Entry], fields: dict[str, Any]) -> Any:
        if self._broken is not None:
            raise AuditError(self._broken)
        entry = kind.model_validate(
            {**fields, "seq": self._seq + 1, "prev": self._head, "time": self._clock()}
        )
        line, digest = line_of(entry)
        self._seq, self._head = entry.seq, digest
        durable = asyncio.get_running_loop().create_future()
        self._pending.append((line, durable))
        if self._writer is None:
            self._start_writer()
        # Shielded: a caller that goes away does not take its record out of the batch.
        await asyncio.shield(durable)
        return entry

    def _start_writer(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write_pending())
        self._writer.add_done_callback(self._writer_ended)

    def _writer_ended(self, _writer: asyncio.Task[None]) -> None:
        self._writer = None
        if self._pending:  # a writer cancelled (brokerd stopping) left them: a new one goes on
            self._start_writer()

    async def _write_pending(self) -> None:
        """Write and fsync whatever is pending, batch after batch, until nothing is."""
        while self._pending:
            batch, self._pending = self._pending, []
            job = asyncio.get_running_loop().run_in_executor(
                None, self._write, [line for line, _ in batch])
            try:
                await asyncio.wait({job})  # neither raises the job's error nor cancels it
            except asyncio.CancelledError:
                # brokerd is stopping: the batch in the thread ends first, so that no
                # later batch (a "caller went away" record) is written beside it
                await asyncio.wait({job})
                self._settle(batch, job)
                raise
            if not self._settle(batch, job):
                return

    def _settle(self, batch: list[tuple[bytes, asyncio.Future[None]]],
                job: asyncio.Future[None]) -> bool:
        """Each record of a written batch is durable; a batch that failed, whatever the
        exception (no caller may wait for ever), fails with every record after it."""
        exc = job.exception()
        if exc is None:
            for _, durable in batch:
                durable.set_result(None)
            return True
        failure = exc if isinstance(exc, AuditError) else AuditError(
            f"{self._path}: cannot append: {exc!r}")
        self._fail(batch + self._pending, failure)
        return False

    def _fail(self, waiting: list[tuple[bytes, asyncio.Future[None]]], exc: AuditError) -> None:
        """A batch that could not be written fails with every record chained after it; the
        chain goes on from what the disk holds, or, if that cannot be read, no record is taken
        until brokerd restarts."""
        self._pending = []
        for _, durable in waiting:
            durable.set_exception(exc)
        try:
            files = log_files(self.directory)
            self._path = files[-1] if files else self.directory / f"{1:08d}.jsonl"
            self._seq, self._head = self._find_head(files)
        except AuditError as unreadable:
            self._broken = f"{exc}; and then: {unreadable}"

    def _write(self, lines: list[bytes]) -> None:
        """Append ``lines`` in order, rotating as each needs, with one fsync per file written
        (and one of the directory when a file was created). Runs in a worker thread."""
        try:
            size = self._path.stat().st_size
        except FileNotFoundError:
            size = 0
        created, chunk = size == 0, list[bytes]()
        for line in lines:
            if size and size + len(line) > self._rotate:
                self._write_file(b"".join(chunk), created)
                self._path = self._path.with_name(f"{int(self._path.stem) + 1:08d}.jsonl")
                created, chunk, size = True, [], 0
            chunk.append(line)
            size += len(line)
        self._write_file(b"".join(chunk), created)

    def _write_file(self, data: bytes, created: bool) -> None:
        if not data:  # the batch's first record opened a new file
            return
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                self.fsyncs += 1
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.directory)
                self.fsyncs += 1
        except OSError as exc:
            raise AuditError(f"{self._path}: cannot append: {exc.strerror}") from None

    def _find_head(self, files: list[Path]) -> tuple[int, str]:
        for path in reversed(files):
            last = _last_line(path)
            if last is None:
                continue
            try:
                entry, stored = parse_line(last)
            except ValueError:
                raise AuditError(f"{path}: the last line is not an audit record; run "
                                 "'brokerd audit verify'") from None
            if line_of(entry)[1] != stored:
                raise AuditError(f"{path}: the last record (seq {entry.seq}) does not match "
                                 "its hash; run 'brokerd audit verify'")
            return entry.seq, stored
        return 0, GENESIS


def _last_line(path: Path) -> bytes | None:
    """The last line of a file, or None when it is empty. A torn last line is refused."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return None
            handle.seek(max(0, size - TAIL_READ))
            tail = handle.read()
    except OSError as exc:
        raise AuditError(f"{path}: cannot read: {exc.strerror}") from None
    if not tail.endswith(b"\n"):
        raise AuditError(f"{path}: the last line is torn (no newline at the end); "
                         "run 'brokerd audit verify'")
    return tail[:-1].rsplit(b"\n", 1)[-1]


def _first_problem(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"])
    return str(exc)
