"""Which sources the Honcho sync may leave unread on a pass.

What to send stays derived from the files every pass; this only spares reading a source (one
session's logs, or notes.md) that cannot yield anything new. A source is skipped when its
signature (each file's size, mtime_ns and inode, and for a session the taint brokerd's file
gave) equals the one taken when it was last read, and that pass settled every outgoing key the
source gave: each one written to Honcho by the ledger, none uncertain or refused, no outage.
Anything else reads it again. The memory of past passes is kept in memory only: a restart reads
everything once, which also covers a changed ceiling.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..taint import SessionTaint


@dataclass(frozen=True, kw_only=True)
class FileStamp:
    path: str
    size: int
    mtime_ns: int
    inode: int


MISSING = -1  # the stamp of a file that is not there (it is then read, and the read says why)


def stamp(path: Path) -> FileStamp:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return FileStamp(path=str(path), size=MISSING, mtime_ns=MISSING, inode=MISSING)
    return FileStamp(path=str(path), size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino)


@dataclass(frozen=True, kw_only=True)
class Signature:
    files: tuple[FileStamp, ...]
    taint: SessionTaint | None = None  # a session's taint as read this pass; None for notes.md


def signature(paths: Iterable[Path], taint: SessionTaint | None = None) -> Signature:
    """Taken before the files are read, so a write during the read shows on the next pass."""
    return Signature(files=tuple(stamp(path) for path in paths), taint=taint)


class RereadDecision(enum.Enum):
    READ = "read"
    SKIP = "skip"


def reread_decision(before: Signature | None, now: Signature, settled: bool) -> RereadDecision:
    """``before``: the signature when the source was last read (None: never, since the start);
    ``settled``: that pass ended with every key the source gave written, nothing pending."""
    if before is not None and settled and before == now:
        return RereadDecision.SKIP
    return RereadDecision.READ


@dataclass(frozen=True)
class _Seen:
    signature: Signature
    settled: bool


class ReadCache:
    """The last read of each source: its signature and whether that pass settled it."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def decide(self, source: str, now: Signature) -> RereadDecision:
        seen = self._seen.get(source)
        if seen is None:
            return reread_decision(None, now, False)
        return reread_decision(seen.signature, now, seen.settled)

    def record(self, source: str, now: Signature, settled: bool) -> None:
        self._seen[source] = _Seen(now, settled)

    def keep_only(self, sources: Iterable[str]) -> None:
        """Forget sources that are gone (a removed session)."""
        keep = set(sources)
        self._seen = {k: v for k, v in self._seen.items() if k in keep}

    def __len__(self) -> int:
        return len(self._seen)
