"""The mount labels on disk and the calls running now: the thin shell over brokerd.labels.

``<home>/broker/labels.jsonl`` holds one canonical JSON line per change, appended and fsynced:
a raise (the session and call that caused it) or the owner's lowering. Replayed in order at
start, the lines give every root's label; a torn last line (a crash mid-append, before its call
started) is skipped, and cut off before the next append. The file is plain for the owner to
read; ``brokerd labels show`` prints it as labels.

``start`` and ``finish`` bracket each sandboxed call. Both run under one lock, so a call's
raises, their propagation through the running calls (and their exposures, kept here in memory
while they run) and its registration as running are one step, and the file holds the raises
before ``start`` returns (before the sandbox exists). A call that would bring a call that reaches
the network over its ceiling (itself or one running) does not start: ``FlowRefused``, which carries
what reached the calls it looked at, since whether it happens depends on them.
``brokerd serve`` holds ``labels.lock`` for its lifetime, so the owner's ``lower`` runs only
while no call does.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bxcore._base import Count, Flag, Model, Text
from bxcore.canonical import canonical_json
from bxcore.tools import DataClass
from bxcore.util import append_lines
from pydantic import Field, ValidationError

from .errors import FlowRefused, LabelError
from .labels import Label, Reach, join_all, seen, settle
from .writeperiods import WritePeriods


class LabelLine(Model):
    """One line of labels.jsonl. A raise joins ``path``'s label with this one; a lowering
    (``lowered``) sets it to this one."""

    path: Text
    data_class: DataClass = Field(alias="class")
    untrusted: Flag
    lowered: Flag = False
    session: Text | None = None  # the call whose start raised it
    call: Count | None = None
    by: Text | None = None  # the user who lowered it

    @property
    def label(self) -> Label:
        return Label(self.data_class, self.untrusted)


@dataclass
class Running:
    reach: Reach
    session: str
    call: int
    exposure: Label  # all that has reached it so far (brokerd.labels)


class LabelStore:
    """``periods``: where the times calls that can write run are recorded (serve's; None for
    the CLI's reads). ``max_running``: calls that may run at once (attack 31k, K6: each holds
    about eight descriptors, and a model can keep a hundred running)."""

    def __init__(self, path: Path, periods: WritePeriods | None = None,
                 max_running: int | None = None):
        self.path = path
        self.periods = periods
        self.max_running = max_running
        self._labels: dict[str, Label] = {}
        self._running: dict[int, Running] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._whole = 0  # bytes up to the end of the last whole line
        for line in self._read():
            old = self._labels.get(line.path)
            self._labels[line.path] = line.label if line.lowered or old is None \
                else old.join(line.label)

    def labels(self) -> dict[str, Label]:
        with self._lock:
            return dict(self._labels)

    def written(self) -> dict[str, bool]:
        """Every root a call has had writable, and whether a running call can write it now."""
        with self._lock:
            writing = {root for entry in self._running.values() for root in entry.reach.writes}
            return {root: root in writing for root in self._labels}

    def start(self, reach: Reach, *, session: str, call: int) -> int:
        """Raise what ``reach`` writes, and what every running call that can read it (or shares
        a zone with it) writes, durably; register the call as running. A token for ``finish``.
        FlowRefused when it would bring a call with egress over its ceiling, LabelError when
        the raises cannot be written: then nothing is raised and the call must not run."""
        with self._lock:
            running = list(self._running.values())
            if self.max_running is not None and len(running) >= self.max_running:
                busy = join_all(r.exposure for r in running)  # whether it runs depends on them
                raise FlowRefused(f"{len(running)} calls are running, the most brokerd runs at "
                                  "once ([broker] max_running_calls); try again when one has "
                                  f"ended. This answer depends on them: it is labelled "
                                  f"{busy.describe()}", busy)
            settled = settle(self._labels, [r.reach for r in running] + [reach],
                             [r.exposure for r in running])
            if settled.over:
                index = max(settled.over)  # this call's own ceiling before a running one's
                # The refusal depends on what reached every call it looked at: the calls over
                # their ceiling and this one (which shares a zone, directly or through others,
                # with each of them), so its answer is labelled with all of it.
                consulted = join_all(settled.exposures[i] for i in (*settled.over, len(running)))
                raise FlowRefused(_over_why(running, index, settled.exposures[index], reach,
                                            consulted), consulted)
            periods = self.periods if reach.writes else None
            try:
                if periods is not None:
                    periods.opened()  # on disk before the sandbox exists
                try:
                    self._append([LabelLine.model_validate({
                        "path": path, "class": label.data_class, "untrusted": label.untrusted,
                        "session": session, "call": call})
                        for path, label in sorted(settled.raised.items())])
                except LabelError:
                    if periods is not None:
                        periods.closed()
                    raise
            except LabelError as exc:  # only a needed raise is written: that tells of them all
                raise LabelError(str(exc), join_all([*settled.exposures,
                                                     *settled.raised.values()])) from None
            self._labels.update(settled.raised)
            for entry, exposure in zip(running, settled.exposures, strict=False):
                entry.exposure = exposure
            token = next(self._tokens)
            self._running[token] = Running(reach, session, call, settled.exposures[-1])
            return token

    def finish(self, token: int) -> Label:
        """The label of everything that reached the call (brokerd.labels, rule 3), now that it
        has ended."""
        with self._lock:
            ended = self._running.pop(token)
            if ended.reach.writes and self.periods is not None:
                self.periods.closed()
            return ended.exposure.join(seen(self._labels, ended.reach.mounts))

    def lower(self, path: str, to: Label, *, by: str) -> Label:
        """Set ``path``'s label to ``to`` (at most what it is); the label it had. Only while no
        call runs: ``brokerd labels lower`` takes ``labels.lock`` first."""
        with self._lock:
            old = self.check_lower(path, to)
            self._append([LabelLine.model_validate({
                "path": path, "class": to.data_class, "untrusted": to.untrusted,
                "lowered": True, "by": by})])
            self._labels[path] = to
            return old

    def check_lower(self, path: str, to: Label) -> Label:
        """The label ``path`` has, when ``lower(path, to)`` may set it; LabelError otherwise."""
        if self._running:
            raise LabelError("a label is lowered only while no call runs")
        old = self._labels.get(path)
        if old is None:
            raise LabelError(f"{path}: no label (labelled: {', '.join(self._labels) or 'none'})")
        if not old.covers(to):
            raise LabelError(f"{path}: {to.describe()} is not lower than {old.describe()}")
        return old

    def _read(self) -> Iterator[LabelLine]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise LabelError(f"{self.path}: cannot read: {exc.strerror}") from None
        lines = data.split(b"\n")
        self._whole = len(data) - len(lines[-1])  # a last line without its newline is torn
        for number, raw in enumerate(lines[:-1], start=1):
            try:
                yield LabelLine.model_validate_json(raw)
            except ValidationError as exc:
                raise LabelError(f"{self.path}:{number}: not a label line: "
                                 f"{exc.errors()[0]['msg']}") from None

    def _append(self, lines: list[LabelLine]) -> None:
        if not lines:
            return
        data = b"".join(canonical_json(line) + b"\n" for line in lines)
        try:
            self._whole = append_lines(self.path, data, self._whole)
        except OSError as exc:
            raise LabelError(f"the mount labels cannot be written: {self.path}: cannot append: "
                             f"{exc.strerror}") from None


def _over_why(running: list[Running], index: int, exposure: Label, reach: Reach,
              consulted: Label) -> str:
    if index == len(running):
        ceiling = reach.ceiling
        whose = "this call reaches the network"
    else:
        other = running[index]
        ceiling = other.reach.ceiling
        whose = (f"a running call that reaches the network (session {other.session}, call "
                 f"{other.call}) shares a mount with this one")
    assert ceiling is not None
    allowed = ", ".join(sorted(c.value for c in ceiling.classes))
    return (f"{whose}, and its grant allows it {allowed} data"
            f"{'' if ceiling.untrusted else ', trusted only'}; running this call now would "
            f"bring it {exposure.describe()} (the sessions, the mounts' labels and the calls "
            f"running beside it). This answer depends on them: it is labelled "
            f"{consulted.describe()}")


@contextlib.contextmanager
def held(lock_path: Path) -> Iterator[None]:
    """Hold ``lock_path`` exclusively (``brokerd serve`` for its lifetime, ``labels lower``
    while it writes); LabelError when another process holds it."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o640)
    except OSError as exc:
        raise LabelError(f"{lock_path}: cannot open: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LabelError(f"{lock_path}: held by a running brokerd; stop it first") from None
        yield
    finally:
        os.close(fd)
