"""A session's taint as memoryd sees it: brokerd's taint file, and what the session log shows.

brokerd owns ``broker/sessions/<id>.json``; memoryd only reads it, through bxcore.taint, where
the format is defined once for both. A session with no file has seen no tool result yet.

memoryd combines it with the log's own ``tool_result`` records and the caller's report and takes
the worst of them: a class above the ceiling or one untrusted read is enough to keep a session
out of the index and out of Honcho.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bxcore.errors import TaintFileError
from bxcore.taint import read_taint
from bxcore.tools import DataClass

from .errors import SessionTaintUnreadable


@dataclass(frozen=True)
class SessionTaint:
    data_class: DataClass = DataClass.PUBLIC  # the highest class seen (public when none)
    untrusted: bool = False

    def join(self, data_class: DataClass, untrusted: bool) -> SessionTaint:
        return SessionTaint(max(self.data_class, data_class), self.untrusted or untrusted)

    def __or__(self, other: SessionTaint) -> SessionTaint:
        return self.join(other.data_class, other.untrusted)


CLEAN = SessionTaint()


def read_taint_file(directory: Path, session: str) -> SessionTaint:
    try:
        taint = read_taint(directory, session)
    except TaintFileError as exc:
        raise SessionTaintUnreadable(str(exc)) from None
    return SessionTaint(taint.highest or DataClass.PUBLIC, taint.untrusted)
