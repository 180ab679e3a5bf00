"""When calls that can write files were running: ``<home>/broker/write-periods``.

A tool can write a file only while its call runs (its sandbox dies with the call), and every
write, through any name or a descriptor kept open, sets the file's status-change time (ctime),
which the kernel alone sets. So a grant or job file whose ctime falls in no such period was last
changed by someone else: the owner, who saw what it says (``brokerd.ownerfiles``).

One line per edge, appended: ``begin <ns>`` before the first of a run of overlapping writing
calls starts (fsynced: the period is on disk before any sandbox exists), ``end <ns>`` when the
last has ended. A ``begin`` with no ``end`` is a period still running, or one a killed brokerd
left: ``brokerd serve`` closes it at start, once the sandboxes it left are gone.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bxcore.util import append_lines

from .errors import LabelError

log = logging.getLogger("brokerd.periods")
CLOCK_REALTIME_COARSE = 5  # linux/time.h; Python 3.11's time module does not name it
TICK_POLL_S = 0.0005  # a begin waits for the coarse clock's next tick in steps of this
COARSEST_NS = 2_000_000_000  # the coarsest file timestamps Linux keeps (FAT's)


@dataclass(frozen=True)
class Period:
    begin: int  # ns since the epoch
    end: int | None  # None: still running (or not closed yet)

    def holds(self, moment_ns: int, step_ns: int = 1) -> bool:
        """Whether a change stamped ``moment_ns`` by a filesystem that keeps time in steps of
        ``step_ns`` may have come in this period: from the start of the step the begin is in."""
        return self.begin - self.begin % step_ns <= moment_ns and (
            self.end is None or moment_ns <= self.end)

    def describe(self) -> str:
        until = "now" if self.end is None else _clock(self.end)
        return f"from {_clock(self.begin)} to {until}"


def parse_periods(text: str, source: Path) -> tuple[Period, ...]:
    """The periods ``text`` records; a torn last line (a crash mid-append) is ignored, since the
    append before it would have recorded its begin. LabelError names a line that is not one."""
    periods: list[Period] = []
    lines = text.split("\n")
    for number, line in enumerate(lines[:-1], start=1):
        edge, _, value = line.partition(" ")
        if edge not in ("begin", "end") or not value.isdigit():
            raise LabelError(f"{source}:{number}: not 'begin <ns>' or 'end <ns>': {line[:80]!r}")
        open_ = bool(periods) and periods[-1].end is None
        if edge == "begin" and not open_:
            periods.append(Period(int(value), None))
        elif edge == "end" and open_:
            periods[-1] = Period(periods[-1].begin, int(value))
        else:
            raise LabelError(f"{source}:{number}: '{edge}' where the last period is "
                             f"{'open' if open_ else 'closed'}")
    return tuple(periods)


def changed_while_writing(ctime_ns: int, periods: tuple[Period, ...]) -> Period | None:
    """The period a change stamped ``ctime_ns`` may have come in, or None."""
    step = timestamp_step(ctime_ns)
    return next((p for p in reversed(periods) if p.holds(ctime_ns, step)), None)


def timestamp_step(ctime_ns: int) -> int:
    """The step of the filesystem that stamped ``ctime_ns``, as its trailing zeros show: a
    filesystem keeping whole seconds (ext4 with small inodes, NFS) or two (FAT) cuts a write's
    stamp down to the step, before the period it came in (attack 31l, F6). One in a billion
    fine stamps ends in nine zeros by chance: then a change up to two seconds before a period
    counts as in it, and the owner saves it again."""
    step = 1
    while step < 10**9 and ctime_ns % (step * 10) == 0:
        step *= 10
    return COARSEST_NS if step == 10**9 else step


class WritePeriods:
    """The file, and the count of writing calls running now (``opened``, ``closed``)."""

    def __init__(self, path: Path):
        self.path = path
        self._running = 0
        self._open_on_disk = False  # an end that could not be written leaves it open
        self._lock = threading.Lock()

    def read(self) -> tuple[Period, ...]:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return ()
        except (OSError, UnicodeDecodeError) as exc:
            raise LabelError(f"{self.path}: cannot read: {exc}") from None
        return parse_periods(text, self.path)

    def close_unfinished(self) -> None:
        """At start, no call of this brokerd runs yet: a period left open ends now."""
        periods = self.read()
        if periods and periods[-1].end is None:
            self._append("end")

    def opened(self) -> None:
        """A call that can write is about to start. LabelError when its period cannot be
        recorded: then the call must not run."""
        with self._lock:
            if not self._open_on_disk:
                self._append("begin")
                self._open_on_disk = True
            self._running += 1

    def closed(self) -> None:
        """A call that could write has ended: its sandbox is gone."""
        with self._lock:
            self._running -= 1
            if self._running == 0:
                try:
                    self._append("end")
                    self._open_on_disk = False
                except LabelError as exc:  # open: later changes count as a tool's, never less
                    log.error("%s; until it can be, every change to a grant or job file "
                              "counts as a tool's", exc)

    def _append(self, edge: str) -> None:
        try:
            append_lines(self.path, f"{edge} {_stamp(edge)}\n".encode())
        except OSError as exc:
            raise LabelError(f"{self.path}: cannot record when calls that write run: "
                             f"{exc.strerror}") from None


def _stamp(edge: str) -> int:
    """Now, as a bound no tool's change can cross and no earlier change of the owner's falls
    inside. The kernel stamps ctime from its fine clock or from its coarse one, a tick behind:
    a begin is read from the fine clock, and returned once the coarse clock has reached it (at
    most a tick), so a write before it is stamped below it and one after it (the sandbox starts
    later) at or above; an end is read from the fine clock once the sandbox is gone, at or after
    any write before it. A begin read from the coarse clock alone took in an owner's save made
    up to a tick before the call (the egress-and-secrets test's grants, refused)."""
    now = time.time_ns()
    while edge == "begin" and time.clock_gettime_ns(CLOCK_REALTIME_COARSE) < now:
        time.sleep(TICK_POLL_S)
    return now


def _clock(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ns / 1e9))
