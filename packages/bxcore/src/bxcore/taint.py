"""A session's taint and its file, ``broker/sessions/<id>.json``.

brokerd is the only writer (each write atomic and fsynced); memoryd reads it to keep tainted
sessions out of its index and out of Honcho. The format lives here, once, so both read the same
bytes the same way. Classes are stored in rank order, so equal taints are equal bytes, and
``brokerd taint rebuild`` can reproduce every file from the audit log byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ._base import Flag, Model
from .canonical import canonical_json
from .errors import TaintFileError
from .ids import SessionId, check_session_id
from .tools import DataClass


@dataclass(frozen=True)
class Taint:
    classes: frozenset[DataClass] = frozenset()
    untrusted: bool = False

    def seen(self, data_class: DataClass, untrusted: bool) -> Taint:
        """The taint after one more result: the union, never less."""
        return Taint(self.classes | {data_class}, self.untrusted or untrusted)

    def seen_at_least(self, floor: DataClass) -> Taint:
        """The taint of a session that also carries ``floor`` data from its start (identity in
        its prompt); unchanged for a public floor, which every grant allows."""
        if floor == DataClass.PUBLIC:
            return self
        return Taint(self.classes | {floor}, self.untrusted)

    @property
    def highest(self) -> DataClass | None:
        return max(self.classes) if self.classes else None

    def describe(self) -> str:
        names = ", ".join(c.value for c in sorted(self.classes)) or "nothing"
        return names + (" (untrusted)" if self.untrusted else "")


CLEAN = Taint()


class TaintFile(Model):
    session: SessionId
    classes: list[DataClass]
    untrusted: Flag


def taint_path(directory: Path, session: str) -> Path:
    return directory / f"{check_session_id(session)}.json"


def encode_taint(session: str, taint: Taint) -> bytes:
    body = TaintFile(session=session, classes=sorted(taint.classes), untrusted=taint.untrusted)
    return canonical_json(body) + b"\n"


def read_taint(directory: Path, session: str) -> Taint:
    """The session's taint; CLEAN when it has no file (it has seen no tool result yet)."""
    path = taint_path(directory, session)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return CLEAN
    except OSError as exc:
        raise TaintFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        body = TaintFile.model_validate_json(data)
    except ValidationError as exc:
        raise TaintFileError(f"{path}: not a taint file: {exc.errors()[0]['msg']}") from None
    if body.session != session:
        raise TaintFileError(f"{path}: names session {body.session!r}, not {session!r}")
    return Taint(frozenset(body.classes), body.untrusted)
