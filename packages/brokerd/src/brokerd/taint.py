"""A session's taint: the data classes it has seen, and whether it read untrusted content.

Kept in ``broker/sessions/<id>.json`` under the state directory (the format is bxcore.taint's),
written only by brokerd (each write atomic and fsynced), and derivable from the audit log's
result records alone: ``rebuild`` replays them through the same ``Taint.seen`` and the same
encoding, so its files are byte-identical to the live ones.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path

from bxcore.errors import TaintFileError
from bxcore.taint import CLEAN, Taint, encode_taint, read_taint, taint_path
from bxcore.tools import DataClass
from bxcore.util import write_durably

from .errors import TaintError

log = logging.getLogger("brokerd.taint")

__all__ = ["CLEAN", "Taint", "TaintStore", "rebuild", "reconcile", "replay"]


class TaintStore:
    """``<home>/broker/sessions``: one file per session that has seen at least one result.

    A write that fails (a full disk, of bytes or inodes) raises TaintError, never a plain
    OSError, and leaves the taint *owed*: ``get`` returns it joined with the file's, and
    ``settle`` writes it once the disk takes it. Until then no call of that session runs
    (brokerd.calls), and nothing else stops: brokerd still starts, serves other sessions and
    stops cleanly. The taint stays derivable from the audit log's results either way."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._owed: dict[str, Taint] = {}

    def path(self, session: str) -> Path:
        return taint_path(self.directory, session)

    def get(self, session: str) -> Taint:
        try:
            taint = read_taint(self.directory, session)
        except TaintFileError as exc:
            raise TaintError(str(exc)) from None
        owed = self._owed.get(session)
        return taint if owed is None else _join(taint, owed)

    def owed(self, session: str) -> bool:
        """Whether ``session``'s taint file is behind its taint (a write that failed)."""
        return session in self._owed

    def settle(self, session: str) -> None:
        """Write ``session``'s owed taint; TaintError while the disk still cannot take it."""
        if session in self._owed:
            self.write(session, self.get(session))

    def record(self, session: str, data_class: DataClass, untrusted: bool) -> Taint:
        """Add one result's label and write the file durably; returns the new taint."""
        taint = self.get(session).seen(data_class, untrusted)
        self.write(session, taint)
        return taint

    def write(self, session: str, taint: Taint) -> None:
        path = self.path(session)
        try:
            # mkdir's mode applies to the leaf only: broker/ would be born 0755 from the umask.
            self.directory.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
            self.directory.mkdir(exist_ok=True, mode=0o750)
            write_durably(path, encode_taint(session, taint), mode=0o640)
        except OSError as exc:  # a full disk: owed until it can be written
            with contextlib.suppress(OSError):
                path.with_name(f".{path.name}.tmp").unlink()  # write_durably's, half written
            self._owed[session] = _join(self._owed.get(session, CLEAN), taint)
            raise TaintError(f"the taint of session {session} cannot be written "
                             f"({exc.strerror}); brokerd's state filesystem needs room") from None
        self._owed.pop(session, None)


def _join(one: Taint, other: Taint) -> Taint:
    return Taint(one.classes | other.classes, one.untrusted or other.untrusted)


def replay(results: Iterable[tuple[str, DataClass, bool]]) -> dict[str, Taint]:
    """Taints from (session, class, untrusted) results in log order: the rebuild's pure core."""
    taints: dict[str, Taint] = {}
    for session, data_class, untrusted in results:
        taints[session] = taints.get(session, CLEAN).seen(data_class, untrusted)
    return taints


def rebuild(results: Iterable[tuple[str, DataClass, bool]], store: TaintStore) -> list[Path]:
    """Write every session's taint file from the audit log's results; the paths written."""
    written = []
    for session, taint in sorted(replay(results).items()):
        store.write(session, taint)
        written.append(store.path(session))
    return written


def reconcile(results: Iterable[tuple[str, DataClass, bool]], store: TaintStore) -> list[str]:
    """Raise each session's taint file to include these results; the sessions it raised.

    A result is audited before its session's taint file is written, so a crash between the two
    leaves the file behind the log: brokerd replays the current audit file at start. A taint only
    rises, so replaying results the file already holds changes nothing.

    A file that cannot be written (a full disk) is a warning, not a refusal to start: its
    session's taint is owed (TaintStore), and no call of that session runs until it is written.
    The temp file of a write a crash cut is removed (the file it was to replace is whole: the
    rename never came).
    """
    for leftover in store.directory.glob(".*.json.tmp"):  # a write a crash cut: never renamed
        with contextlib.suppress(OSError):
            leftover.unlink()
    raised = []
    for session, logged in sorted(replay(results).items()):
        current = store.get(session)
        joined = _join(current, logged)
        if joined != current:
            try:
                store.write(session, joined)
            except TaintError as exc:
                log.warning("%s; no call of session %s runs until it can be", exc, session)
                continue
            raised.append(session)
    return raised
