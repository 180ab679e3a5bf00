"""Sessions on disk: ``<home>/sessions/<id>/<epoch>.baseline.json`` and ``<epoch>.jsonl``.

There is no state file: the log is the state. An open ``Session`` keeps the parsed records in
memory, mirroring the file exactly, so building a request never re-reads the log; the file stays
the truth, and every append reaches the disk (write, fsync) before the record joins the mirror
and before anything that depends on it is sent.

Compaction closes an epoch's log with ``epoch_end`` (the log is kept) and ``start_epoch`` adds
``<n>.baseline.json`` and ``<n>.jsonl`` beside it. ``open`` continues in the highest-numbered
log; if that log is closed (loopd stopped, or memoryd was unreachable, between the two steps), the
session opens closed and the caller starts the next epoch from the summary in it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path

from bxcore.ids import check_session_id
from bxcore.records import (
    Assistant,
    EpochEnd,
    SessionStart,
    ToolResult,
    Usage,
    User,
    parse_record,
)
from bxcore.taint import CLEAN, Taint
from bxcore.util import fsync_dir, sha256, write_all

from .baseline import Baseline, ChatMessage
from .errors import CorruptSession, EpochClosed, NoSuchSession, SessionExists
from .inference.serving import ServingSettings
from .log import Record, encode_record, parse_log
from .replay import messages, replay

SERVING_RECORD = "serving.json"  # the serving settings the session's current epoch began under
_LOG_NAME = re.compile(r"(0|[1-9][0-9]{0,8})\.jsonl")
FIRST_CALL = 1  # ToolRequest.call of a session's first tool call


def baseline_path(directory: Path, epoch: int) -> Path:
    return directory / f"{epoch}.baseline.json"


def log_path(directory: Path, epoch: int) -> Path:
    return directory / f"{epoch}.jsonl"


# A new session is written here, then renamed to sessions/<id>: it appears whole or not at all.
STAGING = ".new-"

class Session:
    """One open session in its current epoch. Only ``append`` changes it."""

    def __init__(
        self, *, session_id: str, epoch: int, directory: Path, baseline: Baseline,
        records: list[Record], size: int, earlier_calls: int = FIRST_CALL - 1,
        earlier_taint: Taint = CLEAN,
    ):
        start = records[0]
        assert isinstance(start, SessionStart)  # parse_log checked it
        self.id = session_id
        self.epoch = epoch
        self.slot = start.slot
        self.marker = start.marker  # None: logged before markers were recorded (legacy form)
        self.baseline = baseline
        self.directory = directory
        self.log_path = log_path(directory, epoch)
        self._records = records
        self._messages = messages(baseline, records)
        self._size = size
        self._broken = False
        # The call counter runs across the whole session: ``earlier_calls`` is the highest
        # ToolResult.call of the epochs before this one (docs/design.md, "The tool port").
        self._next_call = 1 + highest_call(records, earlier_calls)
        self._last_usage = next((r for r in reversed(records) if isinstance(r, Usage)), None)
        # Like the counter, the taint runs across epochs: a summary carries what it summarised.
        self._taint = taint_of(records, earlier_taint)

    def __repr__(self) -> str:
        return f"<Session {self.id} epoch={self.epoch} records={len(self._records)}>"

    @property
    def records(self) -> tuple[Record, ...]:
        return tuple(self._records)

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        """``messages(baseline, records)``, kept up to date as records are appended."""
        return tuple(self._messages)

    @property
    def opening(self) -> str:
        """The epoch's first user message, its marker's neighbour ('' before it is logged)."""
        return _opening(self._records)

    @property
    def last_usage(self) -> Usage | None:
        return self._last_usage

    @property
    def taint(self) -> Taint:
        """Every tool result's class and trust in the session's log, in any epoch."""
        return self._taint

    @property
    def closed(self) -> bool:
        """True once the log ends with ``epoch_end``: the session goes on in the next epoch."""
        return isinstance(self._records[-1], EpochEnd)

    @property
    def highest_call(self) -> int:
        """The highest ``ToolRequest.call`` this session has used, in any epoch."""
        return self._next_call - 1

    def take_call(self) -> int:
        """The next ``ToolRequest.call``: one more than any call this session has made."""
        number = self._next_call
        self._next_call += 1
        return number

    def append(self, record: Record) -> None:
        """Write one record durably, then mirror it. A failed write breaks this object: the
        caller must drop it and open the session again, which reads what reached the disk."""
        if self._broken:
            raise CorruptSession(f"{self.log_path}: an earlier append failed; reopen the session")
        if self.closed:
            raise EpochClosed(f"{self.log_path}: the epoch is closed; the session goes on in the "
                              f"next one")
        line = encode_record(record)
        self._broken = True
        _append_durably(self.log_path, line)
        self._broken = False
        self._size += len(line)
        self._records.append(record)
        message = replay(record)
        if message is not None:
            self._messages.append(message)
        if isinstance(record, Usage):
            self._last_usage = record
        self._taint = taint_of([record], self._taint)

    def is_current(self) -> bool:
        """True if the file is still exactly what this object mirrors (nobody else wrote it)."""
        if self._broken:
            return False
        try:
            return self.log_path.stat().st_size == self._size
        except OSError:
            return False


class SessionStore:
    """The sessions directory under the home. Session ids are ``SessionId``s, so none escapes it."""

    def __init__(self, home: Path):
        self.root = home / "sessions"

    def directory(self, session_id: str) -> Path:
        return self.root / check_session_id(session_id)

    def exists(self, session_id: str) -> bool:
        return self.directory(session_id).is_dir()

    def remove_staging(self) -> list[str]:
        """Remove what a crash inside ``create`` left: staging directories never renamed into
        place, so no turn of theirs was ever acknowledged. Call at start, before serving."""
        left = sorted(p for p in self.root.glob(f"{STAGING}*") if p.is_dir())
        for path in left:
            shutil.rmtree(path)
        return [path.name for path in left]

    def create(self, session_id: str, baseline: Baseline, *, slot: int, time: str,
               marker: str | None = None) -> Session:
        """A new session in epoch 0. It appears whole or not at all: both files are written in
        a hidden directory, made durable, then renamed into place."""
        final = self.directory(session_id)
        if final.exists():
            raise SessionExists(f"session {session_id} exists already")
        self.root.mkdir(mode=0o750, parents=True, exist_ok=True)
        staging = self.root / f"{STAGING}{session_id}-{secrets.token_hex(4)}"
        staging.mkdir(mode=0o750)
        try:
            data, start, line = _epoch_start(session_id, 0, baseline, slot=slot, time=time,
                                             marker=marker)
            _write_new(baseline_path(staging, 0), data)
            _write_new(log_path(staging, 0), line)
            fsync_dir(staging)
            if final.exists():  # created by another process meanwhile
                raise SessionExists(f"session {session_id} exists already")
            os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_dir(self.root)
        # The session uses the baseline as read back from its file, as a resumed one will:
        # canonical JSON sorts keys, and a tool's parameters in another key order render as
        # another prompt, so the first request after a restart would miss the cache.
        return Session(
            session_id=session_id, epoch=0, directory=final, baseline=Baseline.from_json(data),
            records=[start], size=len(line),
        )

    def start_epoch(self, closed: Session, baseline: Baseline, *, time: str) -> Session:
        """The epoch after ``closed`` (whose log ends with ``epoch_end``), on the same slot.

        The baseline file is written first, then the log, each complete before it is renamed
        into place: a crash between them leaves a baseline file no log claims, which the next
        attempt replaces, and ``open`` still finds the closed epoch."""
        if not closed.closed:
            raise CorruptSession(f"{closed.log_path}: the epoch is not closed")
        epoch = closed.epoch + 1
        data, start, line = _epoch_start(closed.id, epoch, baseline, slot=closed.slot, time=time,
                                         marker=closed.marker)
        _replace(baseline_path(closed.directory, epoch), data)
        target = log_path(closed.directory, epoch)
        if target.exists():
            raise CorruptSession(f"{target}: exists already; epoch {epoch} was started before")
        _replace(target, line)
        fsync_dir(closed.directory)
        return Session(
            session_id=closed.id, epoch=epoch, directory=closed.directory,
            baseline=Baseline.from_json(data), records=[start], size=len(line),
            earlier_calls=closed.highest_call, earlier_taint=closed.taint,
        )

    def record_serving(self, session: Session, settings: ServingSettings) -> None:
        """Record the serving settings ``session``'s epoch begins under (docs/design.md),
        beside its logs; a new epoch records afresh (its prompt is read anew anyway)."""
        _replace(session.directory / SERVING_RECORD, settings.model_dump_json().encode() + b"\n")

    def latest_serving(self) -> tuple[str, ServingSettings] | None:
        """The newest record of any session, with the session's id: the settings the latest
        session (or epoch) began under; None if no session has one."""
        records = sorted(
            ((path.stat().st_mtime_ns, path) for path in self.root.glob(f"*/{SERVING_RECORD}")),
            reverse=True,
        ) if self.root.is_dir() else []
        if not records:
            return None
        path = records[0][1]
        try:
            return path.parent.name, ServingSettings.model_validate_json(_read(path))
        except ValueError as exc:
            raise CorruptSession(f"{path}: not a serving record: {exc}") from None

    def recent_markers(self, limit: int) -> list[tuple[str, str | None, str]]:
        """(session, marker, first user message) of the ``limit`` sessions whose current log was
        written last, oldest first (marker None: the legacy one); sessions whose log does not
        parse are left out (the book only keeps markers apart)."""
        if not self.root.is_dir():
            return []
        latest = []
        for directory in self.root.iterdir():
            if directory.name.startswith(STAGING) or not directory.is_dir():
                continue
            with contextlib.suppress(CorruptSession, OSError):
                path = log_path(directory, _current_epoch(directory))
                latest.append((path.stat().st_mtime_ns, directory.name, path))
        found: list[tuple[str, str | None, str]] = []
        for _, session_id, path in sorted(latest)[-limit:]:
            with contextlib.suppress(OSError, ValueError), path.open("rb") as file:
                start = SessionStart.model_validate_json(file.readline())
                # the first user message is the next line or a few lines on
                opening = next((r for r in map(parse_record, file) if isinstance(r, User)), None)
                found.append((session_id, start.marker,
                              "" if opening is None else opening.content))
        return found

    def open(self, session_id: str) -> Session:
        """Read a session's current epoch: its baseline from the baseline file (checked against
        the hash in ``session_start``) and every record of its log."""
        directory = self.directory(session_id)
        if not directory.is_dir():
            raise NoSuchSession(f"no session {session_id}")
        epoch = _current_epoch(directory)
        path = log_path(directory, epoch)
        data = _read(path)
        records = parse_log(data, str(path), session=session_id, epoch=epoch)
        start = records[0]
        assert isinstance(start, SessionStart)
        base_path = baseline_path(directory, epoch)
        base_data = _read(base_path)
        if sha256(base_data) != start.baseline:
            raise CorruptSession(
                f"{base_path}: its sha256 is not the {start.baseline} that {path} line 1 records"
            )
        calls, taint = _earlier(directory, session_id, epoch)
        return Session(
            session_id=session_id, epoch=epoch, directory=directory,
            baseline=Baseline.parse(base_data, base_path), records=records, size=len(data),
            earlier_calls=calls, earlier_taint=taint,
        )


def _opening(records: Sequence[Record]) -> str:
    return next((r.content for r in records if isinstance(r, User)), "")


def _epoch_start(
    session_id: str, epoch: int, baseline: Baseline, *, slot: int, time: str, marker: str | None
) -> tuple[bytes, SessionStart, bytes]:
    """An epoch's baseline file bytes, its session_start, and that record's line."""
    data = baseline.to_json()
    start = SessionStart(time=time, session=session_id, epoch=epoch, slot=slot,
                         baseline=sha256(data), marker=marker)
    return data, start, encode_record(start)


def highest_call(records: list[Record], floor: int = FIRST_CALL - 1) -> int:
    """The highest call number ``records`` may have sent: their highest ``ToolResult.call`` (or
    ``floor``), plus one for each tool call of an ``Assistant`` that has no result after it.
    A call takes its number before it is sent and records it only with its result, so a loopd
    that died while calls ran may have sent those numbers; brokerd refuses a number it has
    seen, so a restart must not use them again (docs/decisions/answers-read-beneath-mounts.md).
    """
    highest = max((r.call for r in records if isinstance(r, ToolResult)), default=floor)
    unanswered, waiting = 0, 0
    for record in records:
        if isinstance(record, Assistant):
            unanswered += waiting
            waiting = len(record.tool_calls or ())
        elif isinstance(record, ToolResult):
            waiting = max(waiting - 1, 0)
    return max(highest, floor) + unanswered + waiting


def taint_of(records: list[Record], taint: Taint = CLEAN) -> Taint:
    """``taint`` with every ``ToolResult`` in ``records`` seen."""
    for record in records:
        if isinstance(record, ToolResult):
            taint = taint.seen(record.data_class, record.untrusted)
    return taint


def _earlier(directory: Path, session_id: str, epoch: int) -> tuple[int, Taint]:
    """The highest call and the taint of the closed epochs before ``epoch``: their logs are read
    once, when the session is opened (logs written before the counter ran across epochs
    restarted it, so every earlier epoch counts, not only the last)."""
    highest = FIRST_CALL - 1
    taint = CLEAN
    for earlier in range(epoch):
        path = log_path(directory, earlier)
        if path.exists():
            records = parse_log(_read(path), str(path), session=session_id, epoch=earlier)
            highest = highest_call(records, highest)
            taint = taint_of(records, taint)
    return highest, taint


def _current_epoch(directory: Path) -> int:
    epochs = [int(m.group(1)) for p in directory.iterdir() if (m := _LOG_NAME.fullmatch(p.name))]
    if not epochs:
        raise CorruptSession(f"{directory}: no log file (<epoch>.jsonl)")
    return max(epochs)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CorruptSession(f"{path}: cannot read: {exc.strerror or exc}") from None


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to a hidden file, make it durable, and rename it over ``path``."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    try:
        _write_new(staging, data)
        os.rename(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def _append_durably(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        write_all(fd, line)
        os.fsync(fd)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
