"""A session's taint as memoryd sees it: brokerd's taint file, and what the session log shows.

brokerd owns ``broker/sessions/<id>.json`` (``{"session", "classes", "untrusted"}``, see
brokerd/taint.py); memoryd only reads it, with its own narrow model of those three fields, since
a role never imports another. A session with no file has seen no tool result yet.

memoryd combines it with the log's own ``tool_result`` records and the caller's report and takes
the worst of them: a class above the ceiling or one untrusted read is enough to keep a session
out of the index and out of Honcho.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bxcore._base import Flag, Model
from bxcore.ids import SessionId, check_session_id
from bxcore.tools import DataClass
from pydantic import ValidationError

from .errors import TaintFileError


class _TaintFile(Model):
    session: SessionId
    classes: list[DataClass]
    untrusted: Flag


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
    path = directory / f"{check_session_id(session)}.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return CLEAN
    except OSError as exc:
        raise TaintFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        body = _TaintFile.model_validate_json(data)
    except ValidationError as exc:
        raise TaintFileError(f"{path}: not a taint file: {exc.errors()[0]['msg']}") from None
    if body.session != session:
        raise TaintFileError(f"{path}: names session {body.session!r}, not {session!r}")
    highest = max(body.classes) if body.classes else DataClass.PUBLIC
    return SessionTaint(highest, body.untrusted)
