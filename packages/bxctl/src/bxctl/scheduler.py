"""``bxctl scheduler``: the local stack's stand-in for the jobs' systemd timers.

While ``bxctl up`` runs the stack, this process runs each scheduled job when its schedule falls
due, exactly as ``boxmaker-job-<name>.timer`` does on the host: ``bxctl job run <name>`` (a turn
on the background slot; brokerd decides each call against the grants of that moment; the answer
goes to the owner). When a schedule elapses is systemd's answer (``systemd-analyze calendar
--base-time``), so a schedule means here what it means to the timer. Like a timer without
``Persistent=``, a run missed while the stack was down is not made up, and runs do not overlap:
jobs due together run one after the other. A job added, changed or removed is picked up without a
restart: the jobs directory (``[broker] jobs``) is looked at every ``POLL`` seconds (names, sizes
and times only) and read again when that changed, and every ``RESCAN`` seconds in any case.

The core (``next_elapse``, ``Plan``) is pure; ``run`` is the shell around it.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import load_config
from bxcore.daemon import Notifier

from .roles import config_option, default_config, role_command, run_role

log = logging.getLogger("bxctl.scheduler")

RESCAN = 60.0  # seconds between reads of the jobs directory, changed or not
POLL = 1.0  # seconds between looks at the jobs directory (a stat of each file, no parsing)
_ELAPSE = re.compile(
    r"^\s*(Next elapse|\(in UTC\)): (?:\w+ )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (\S+))?\s*$")


class ScheduleError(Exception):
    """A schedule systemd does not accept; the message is systemd's."""


def next_elapse(output: str) -> datetime | None:
    """The next elapse in UTC from ``systemd-analyze calendar`` output, or None for "never".

    systemd prints it in the local zone, with an ``(in UTC)`` line after it when that zone is
    not UTC; the UTC one is taken."""
    found: dict[str, tuple[str, str | None]] = {}
    for line in output.splitlines():
        match = _ELAPSE.match(line)
        if match:
            found[match[1]] = (match[2], match[3])
        elif re.match(r"^\s*Next elapse: never\s*$", line):
            return None
    stamp, zone = found.get("(in UTC)") or found.get("Next elapse") or (None, None)
    if stamp is None or zone != "UTC":
        raise ScheduleError(f"no next elapse in UTC in systemd-analyze's output: {output!r}")
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def elapse_after(schedule: str, after: datetime) -> datetime | None:
    """When ``schedule`` (OnCalendar= text) next elapses after ``after``, as systemd says."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        raise ScheduleError("systemd-analyze is not installed (scripts/setup installs systemd)")
    done = subprocess.run([tool, "calendar", f"--base-time=@{int(after.timestamp())}", "--",
                           schedule], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ScheduleError(lines[-1] if lines else f"systemd-analyze exited {done.returncode}")
    return next_elapse(done.stdout)


@dataclass
class Plan:
    """Each job's schedule and next run (pure: the caller passes the time and the calendar)."""

    calendar: Callable[[str, datetime], datetime | None]
    schedules: dict[str, str] = field(default_factory=dict)
    next_run: dict[str, datetime | None] = field(default_factory=dict)

    def update(self, schedules: dict[str, str], now: datetime) -> None:
        """Take the jobs as they are now: a new or changed schedule counts from ``now``."""
        for name in set(self.schedules) - set(schedules):
            self.next_run.pop(name, None)
        for name, schedule in schedules.items():
            if self.schedules.get(name) != schedule or name not in self.next_run:
                self.next_run[name] = self.calendar(schedule, now)
        self.schedules = dict(schedules)

    def due(self, now: datetime) -> list[str]:
        """The jobs due at ``now``, earliest first."""
        ready = [(when, name) for name, when in self.next_run.items()
                 if when is not None and when <= now]
        return [name for _, name in sorted(ready)]

    def ran(self, name: str, now: datetime) -> None:
        """``name`` ran: its next run is the first elapse after ``now`` (missed ones skipped)."""
        self.next_run[name] = self.calendar(self.schedules[name], now)

    def wait(self, now: datetime, longest: float) -> float:
        """Seconds to sleep before the next due job, at most ``longest``."""
        upcoming = [w for w in self.next_run.values() if w is not None]
        if not upcoming:
            return longest
        return max(0.0, min(longest, (min(upcoming) - now).total_seconds()))


def read_schedules(jobs_dir: Path, config_path: Path) -> dict[str, str]:
    """Every job's schedule, read by brokerd (the code that owns the format); a job brokerd
    refuses, or whose schedule systemd refuses, is logged and left out."""
    schedules = {}
    for path in sorted(jobs_dir.glob("*.toml")) if jobs_dir.is_dir() else []:
        shown = run_role("brokerd", ["jobs", "show", path.stem], config_path, capture=True)
        if shown.returncode != 0:
            log.error("job %s refused: %s", path.stem, shown.stderr.strip())
            continue
        schedules[path.stem] = json.loads(shown.stdout)["schedule"]
    return schedules


def _calendar(schedule: str, after: datetime) -> datetime | None:
    try:
        return elapse_after(schedule, after)
    except ScheduleError as exc:
        log.error("schedule %r is not run: %s", schedule, exc)
        return None


JobFiles = frozenset[tuple[str, int, int]]


def job_files(jobs_dir: Path) -> JobFiles:
    """What a job file's change would change: each one's name, size and modification time."""
    found = set()
    for path in jobs_dir.glob("*.toml") if jobs_dir.is_dir() else []:
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed between the listing and the stat
            continue
        found.add((path.name, stat.st_size, stat.st_mtime_ns))
    return frozenset(found)


def run(config_path: Path, *, rescan: float = RESCAN, notifier: Notifier | None = None) -> None:
    """Until SIGTERM: run each job when it is due."""
    jobs_dir = load_config(config_path).broker.jobs_dir()
    plan = Plan(calendar=_calendar)
    seen = job_files(jobs_dir)
    plan.update(read_schedules(jobs_dir, config_path), datetime.now(UTC))
    (notifier or Notifier()).ready(f"{len(plan.schedules)} job(s) from {jobs_dir}")
    log.info("scheduling %d job(s) from %s", len(plan.schedules), jobs_dir)
    scanned = time.monotonic()
    while True:
        for name in plan.due(datetime.now(UTC)):
            log.info("job %s is due: running it", name)
            done = subprocess.run([role_command("bxctl"), "job", "run", name, "--config",
                                   str(config_path)], capture_output=True, text=True,
                                  check=False)
            log.info("job %s exited %d\n%s%s", name, done.returncode, done.stderr, done.stdout)
            plan.ran(name, datetime.now(UTC))
        now_seen = job_files(jobs_dir)
        if now_seen != seen or time.monotonic() - scanned >= rescan:
            seen = now_seen
            plan.update(read_schedules(jobs_dir, config_path), datetime.now(UTC))
            scanned = time.monotonic()
        time.sleep(plan.wait(datetime.now(UTC), min(rescan, POLL)))


@click.command("scheduler", cls=cli_errors.Command)
@config_option
@click.option("--rescan", default=RESCAN, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between reads of the jobs directory.")
def scheduler_command(config_path: Path | None, rescan: float) -> None:
    """Run the scheduled jobs of [broker] jobs when they fall due (bxctl up starts this; on the
    host each job has its own systemd timer instead).

    Example: bxctl scheduler --config ~/.local/state/boxmaker/config.toml
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    run(config_path or default_config(), rescan=rescan)


COMMANDS = [scheduler_command]
