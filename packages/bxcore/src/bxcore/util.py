"""Small shared helpers: hashing and time, so every role spells them the same way."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import UTC, datetime
from pathlib import Path

SHA256_PREFIX = "sha256:"
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})", re.ASCII
)


def sha256(data: bytes) -> str:
    """The algorithm-tagged SHA-256 of some bytes: ``sha256:<64 hex digits>``."""
    return SHA256_PREFIX + hashlib.sha256(data).hexdigest()


def text_sha256(text: str) -> str:
    """``sha256`` of text's UTF-8. Any Python string hashes, also one holding a lone surrogate
    (which UTF-8 cannot carry: it is hashed as its surrogate bytes), so a request whose text
    cannot be encoded can still be audited; for every other string this is plain UTF-8."""
    return sha256(text.encode("utf-8", "surrogatepass"))


def now_rfc3339() -> str:
    """The current UTC time, RFC 3339 with microseconds and a ``Z``."""
    return format_rfc3339(datetime.now(UTC))


def format_rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("refusing a naive datetime: Boxmaker times are UTC")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> datetime:
    """An RFC 3339 time with an offset; the shape and the calendar are both checked."""
    # fullmatch, not match: "$" would let a trailing newline through into a log record.
    if not isinstance(text, str) or not _RFC3339.fullmatch(text):
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an RFC 3339 time (no such date or time): {text!r}") from None


def is_rfc3339(text: str) -> bool:
    try:
        parse_rfc3339(text)
    except ValueError:
        return False
    return True


def write_durably(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically: temp file, fsync, rename, fsync the dir. A
    write that fails leaves ``path`` as it was and no temp file."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def append_lines(path: Path, data: bytes, whole: int | None = None) -> int:
    """Append ``data`` (whole lines) to ``path`` after its first ``whole`` bytes, cutting off the
    torn tail a crash or a failed append left (``whole`` None: up to its last newline); fsynced,
    and its directory too when the file is new. The file's length after. OSError as it comes."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        if whole is None:
            whole = whole_lines(fd)
        os.ftruncate(fd, whole)
        os.lseek(fd, whole, os.SEEK_SET)
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    return whole + len(data)


def whole_lines(fd: int) -> int:
    """The length of the file's whole lines: the offset just after its last newline (0 when it
    has none), found by reading backwards from its end."""
    end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - 65536)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data``: a disk that fills during a write returns a short count
    first (ENOSPC only on the next), so one ``os.write`` can leave a torn file that looks whole
    (the attack on issue 31's memory writes tore identity files and journal entries so)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
