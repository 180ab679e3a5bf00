"""A session's taint: the data classes it has seen, and whether it read untrusted content.

Kept in ``broker/sessions/<id>.json`` under the state directory (the format is bxcore.taint's),
written only by brokerd (each write atomic and fsynced), and derivable from the audit log's
result records alone: ``rebuild`` replays them through the same ``Taint.seen`` and the same
encoding, so its files are byte-identical to the live ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bxcore.errors import TaintFileError
from bxcore.taint import CLEAN, Taint, encode_taint, read_taint, taint_path
from bxcore.tools import DataClass
from bxcore.util import write_durably

from .errors import TaintError

__all__ = ["CLEAN", "Taint", "TaintStore", "rebuild", "reconcile", "replay"]


class TaintStore:
    """``<home>/broker/sessions``: one file per session that has seen at least one result."""

    def __init__(self, directory: Path):
        self.directory = directory

    def path(self, session: str) -> Path:
        return taint_path(self.directory, session)

    def get(self, session: str) -> Taint:
        try:
            return read_taint(self.directory, session)
        except TaintFileError as exc:
            raise TaintError(str(exc)) from None

    def record(self, session: str, data_class: DataClass, untrusted: bool) -> Taint:
        """Add one result's label and write the file durably; returns the new taint."""
        taint = self.get(session).seen(data_class, untrusted)
        self.write(session, taint)
        return taint

    def write(self, session: str, taint: Taint) -> None:
        # mkdir's mode applies to the leaf only: broker/ would be born 0755 from the umask.
        self.directory.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.directory.mkdir(exist_ok=True, mode=0o750)
        try:
            write_durably(self.path(session), encode_taint(session, taint), mode=0o640)
        except OSError as exc:  # a full disk: the result is not given, brokerd does not start
            raise TaintError(f"the taint of session {session} cannot be written "
                             f"({exc.strerror}); brokerd's state filesystem needs room") from None


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
    """
    raised = []
    for session, logged in sorted(replay(results).items()):
        current = store.get(session)
        joined = Taint(current.classes | logged.classes, current.untrusted or logged.untrusted)
        if joined != current:
            store.write(session, joined)
            raised.append(session)
    return raised
