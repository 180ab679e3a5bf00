"""A session's taint: the data classes it has seen, and whether it read untrusted content.

Kept in ``broker/sessions/<id>.json`` under the state directory, written only by brokerd (each
write atomic and fsynced), and derivable from the audit log's result records alone: ``rebuild``
replays them through the same ``Taint.seen`` and the same encoding, so its files are
byte-identical to the live ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bxcore._base import Flag, Model
from bxcore.canonical import canonical_json
from bxcore.ids import SessionId, check_session_id
from bxcore.tools import DataClass
from bxcore.util import write_durably
from pydantic import ValidationError

from .errors import TaintError


@dataclass(frozen=True)
class Taint:
    classes: frozenset[DataClass] = frozenset()
    untrusted: bool = False

    def seen(self, data_class: DataClass, untrusted: bool) -> Taint:
        """The taint after one more result: the union, never less."""
        return Taint(self.classes | {data_class}, self.untrusted or untrusted)

    @property
    def highest(self) -> DataClass | None:
        return max(self.classes) if self.classes else None

    def describe(self) -> str:
        names = ", ".join(c.value for c in sorted(self.classes)) or "nothing"
        return names + (" (untrusted)" if self.untrusted else "")


CLEAN = Taint()


class TaintFile(Model):
    """The file's form: classes in rank order, so equal taints are equal bytes."""

    session: SessionId
    classes: list[DataClass]
    untrusted: Flag


def encode(session: str, taint: Taint) -> bytes:
    body = TaintFile(session=session, classes=sorted(taint.classes), untrusted=taint.untrusted)
    return canonical_json(body) + b"\n"


class TaintStore:
    """``<home>/broker/sessions``: one file per session that has seen at least one result."""

    def __init__(self, directory: Path):
        self.directory = directory

    def path(self, session: str) -> Path:
        return self.directory / f"{check_session_id(session)}.json"

    def get(self, session: str) -> Taint:
        path = self.path(session)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return CLEAN
        except OSError as exc:
            raise TaintError(f"{path}: cannot read: {exc.strerror}") from None
        try:
            body = TaintFile.model_validate_json(data)
        except ValidationError as exc:
            raise TaintError(f"{path}: not a taint file: {exc.errors()[0]['msg']}") from None
        if body.session != session:
            raise TaintError(f"{path}: names session {body.session!r}, not {session!r}")
        return Taint(frozenset(body.classes), body.untrusted)

    def record(self, session: str, data_class: DataClass, untrusted: bool) -> Taint:
        """Add one result's label and write the file durably; returns the new taint."""
        taint = self.get(session).seen(data_class, untrusted)
        self.write(session, taint)
        return taint

    def write(self, session: str, taint: Taint) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_durably(self.path(session), encode(session, taint))


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
