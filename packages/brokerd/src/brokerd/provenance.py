"""Provenance: what brokerd's tools wrote, from which session, and what that session had seen.

A session that read untrusted content (or holds private or secret data) may write files through
a writable mount. Whatever it wrote must read back as it was written: untrusted, and at least
that class. After such a call brokerd walks the call's writable mounts for entries changed since
the call started (``st_ctime``, which the tool cannot set back) and records each one in
``<home>/broker/provenance.jsonl`` (one canonical JSON line per path, appended and fsynced).
A walk that passes ``WALK_LIMIT`` entries records the whole mount instead.

A later call's result is raised to the marks it can see: for the toolkit's path-scoped readers
(``fs.read``, ``fs.list``, ``fs.search``) the marks at, under, or covering its ``path``; for any
other tool the marks inside, or covering, any of its mounts. A mark is never removed: deleting
or rewriting the file from a clean session does not clear it (``brokerd`` keeps no content).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bxcore._base import Count, Flag, Model, Text
from bxcore.canonical import canonical_json
from bxcore.tools import DataClass
from pydantic import Field, ValidationError

from .errors import ProvenanceError

WALK_LIMIT = 20_000  # entries one walk visits before it marks the whole mount
PATH_SCOPED = frozenset({"fs.read", "fs.list", "fs.search"})  # tools that read only ``path``
CTIME_SLACK_NS = 1_000_000_000  # file times come from a coarse clock: look back one second


@dataclass(frozen=True)
class Mark:
    data_class: DataClass
    untrusted: bool

    def join(self, other: Mark) -> Mark:
        return Mark(max(self.data_class, other.data_class), self.untrusted or other.untrusted)

    @property
    def plain(self) -> bool:
        """Public and trusted: nothing to carry."""
        return self.data_class == DataClass.PUBLIC and not self.untrusted


class MarkRecord(Model):
    """One line of provenance.jsonl: a path a call wrote, and what its session had seen."""

    path: Text
    data_class: DataClass = Field(alias="class")
    untrusted: Flag
    subtree: Flag  # the whole tree under ``path`` (a walk that passed its limit)
    session: Text
    call: Count


def _covers(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def changed_since(root: Path, since_ns: int, limit: int = WALK_LIMIT) -> tuple[list[str], bool]:
    """Entries under ``root`` (itself included) whose ctime is at or after ``since_ns``, without
    following symlinks; and whether the walk stopped at ``limit`` entries."""
    found: list[str] = []
    seen = 0
    stack = [str(root)]
    while stack:
        current = stack.pop()
        try:
            info = os.lstat(current)
        except OSError:
            continue
        seen += 1
        if seen > limit:
            return found, True
        if info.st_ctime_ns >= since_ns:
            found.append(current)
        if not os.path.isdir(current) or os.path.islink(current):
            continue
        try:
            stack.extend(entry.path for entry in os.scandir(current))
        except OSError:
            continue
    return found, False


class ProvenanceStore:
    """The marks on disk and in memory; brokerd is the only writer."""

    def __init__(self, path: Path):
        self.path = path
        self._marks: dict[str, tuple[Mark, bool]] = {}  # path -> (mark, whole subtree)
        for row in self._rows():
            self._add(row.path, Mark(row.data_class, row.untrusted), row.subtree)

    def _rows(self) -> Iterator[MarkRecord]:
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ProvenanceError(f"{self.path}: cannot read: {exc.strerror}") from None
        for number, line in enumerate(lines, start=1):
            try:
                yield MarkRecord.model_validate_json(line)
            except ValidationError as exc:
                if number == len(lines):
                    continue  # a torn last line: the crash came mid-append, before the answer
                raise ProvenanceError(f"{self.path}:{number}: not a provenance record: "
                                      f"{exc.errors()[0]['msg']}") from None

    def _add(self, path: str, mark: Mark, subtree: bool) -> None:
        old = self._marks.get(path)
        if old is not None:
            mark, subtree = old[0].join(mark), old[1] or subtree
        self._marks[path] = (mark, subtree)

    def record(self, roots: Iterable[Path], since_ns: int, mark: Mark, *, session: str,
               call: int) -> list[str]:
        """Mark what changed under ``roots`` since ``since_ns``; the paths marked."""
        if mark.plain:
            return []
        marked: list[tuple[str, bool]] = []
        for root in roots:
            changed, stopped = changed_since(root, since_ns - CTIME_SLACK_NS)
            marked.extend([(str(root), True)] if stopped else [(p, False) for p in changed])
        lines = b"".join(canonical_json(MarkRecord.model_validate({
            "path": path, "class": mark.data_class, "untrusted": mark.untrusted,
            "subtree": subtree, "session": session, "call": call})) + b"\n"
            for path, subtree in marked)
        if lines:
            self._append(lines)
        for path, subtree in marked:
            self._add(path, mark, subtree)
        return [path for path, _ in marked]

    def _append(self, lines: bytes) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise ProvenanceError(f"{self.path}: cannot append: {exc.strerror}") from None

    def seen_by(self, tool: str, path: str | None, mounts: Iterable[Path]) -> Mark | None:
        """The join of the marks a call can read, or None when it can read none."""
        scopes = [path] if tool in PATH_SCOPED and path is not None else [str(m) for m in mounts]
        found: Mark | None = None
        for marked, (mark, subtree) in self._marks.items():
            if any(_covers(scope, marked) or (subtree and _covers(marked, scope))
                   for scope in scopes):
                found = mark if found is None else found.join(mark)
        return found
