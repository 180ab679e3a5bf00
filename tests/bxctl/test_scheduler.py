"""``bxctl scheduler``, the local stack's stand-in for the jobs' systemd timers: when a schedule
elapses is systemd's own answer (``systemd-analyze calendar``), the plan runs each job when it is
due and then at its next elapse after that (missed runs are not made up), and a real scheduler
process runs ``bxctl job run`` on schedule: each run a new background-slot session."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bxctl.scheduler import Plan, ScheduleError, elapse_after, next_elapse
from fake_loopd import FakeLoopd, done

BXCTL = str(Path(sys.executable).parent / "bxctl")
needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="no systemd-analyze")

IN_UTC = """  Original form: *-*-* 07:30
Normalized form: *-*-* 07:30:00
    Next elapse: Wed 2023-11-15 07:30:00 UTC
       From now: 3 years 0 months ago
"""
IN_BERLIN = """  Original form: *-*-* 07:30
Normalized form: *-*-* 07:30:00
    Next elapse: Wed 2023-11-15 07:30:00 CET
       (in UTC): Wed 2023-11-15 06:30:00 UTC
       From now: 3 years 0 months ago
"""
NEVER = """  Original form: 2020-01-01
Normalized form: 2020-01-01 00:00:00
    Next elapse: never
"""


@pytest.mark.parametrize(("output", "expected"), [
    (IN_UTC, datetime(2023, 11, 15, 7, 30, tzinfo=UTC)),
    (IN_BERLIN, datetime(2023, 11, 15, 6, 30, tzinfo=UTC)),  # the UTC line, not the local one
    (NEVER, None),
])
def test_the_next_elapse_is_read_in_utc_from_systemds_output(output, expected):
    assert next_elapse(output) == expected


def test_output_without_a_utc_elapse_is_an_error_not_a_guess():
    with pytest.raises(ScheduleError, match="no next elapse in UTC"):
        next_elapse(IN_BERLIN.replace("       (in UTC): Wed 2023-11-15 06:30:00 UTC\n", ""))


@needs_systemd_analyze
def test_systemd_says_when_a_schedule_elapses_next(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    base = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert elapse_after("*-*-* 07:30:00", base) == datetime(2026, 12, 2, 7, 30, tzinfo=UTC)
    assert elapse_after("Mon..Fri 09:00", base) == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert elapse_after("2020-01-01", base) is None
    with pytest.raises(ScheduleError, match=r"(?i)failed to parse"):
        elapse_after("every morning", base)


T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)


def every(minutes: int):
    """A calendar where a schedule "N" elapses every N minutes from T0 (pure, for the plan)."""
    def calendar(schedule: str, after: datetime) -> datetime | None:
        step = timedelta(minutes=int(schedule))
        count = (after - T0) // step + 1
        return T0 + count * step
    return calendar


def test_the_plan_runs_a_job_when_due_and_then_at_its_next_elapse():
    plan = Plan(calendar=every(10))
    plan.update({"notes": "10", "mail": "15"}, T0)
    assert plan.due(T0 + timedelta(minutes=9)) == []
    assert plan.wait(T0 + timedelta(minutes=9), 3600) == 60
    assert plan.due(T0 + timedelta(minutes=16)) == ["notes", "mail"]  # earliest first
    plan.ran("notes", T0 + timedelta(minutes=16))
    assert plan.next_run["notes"] == T0 + timedelta(minutes=20)


def test_runs_missed_while_busy_or_down_are_not_made_up():
    plan = Plan(calendar=every(10))
    plan.update({"notes": "10"}, T0)
    plan.ran("notes", T0 + timedelta(minutes=55))  # the run itself took long
    assert plan.next_run["notes"] == T0 + timedelta(minutes=60)


def test_a_changed_schedule_counts_from_now_and_a_removed_job_is_dropped():
    plan = Plan(calendar=every(10))
    plan.update({"notes": "10", "mail": "10"}, T0)
    plan.update({"notes": "30"}, T0 + timedelta(minutes=5))
    assert plan.next_run == {"notes": T0 + timedelta(minutes=30)}
    assert plan.wait(T0 + timedelta(minutes=5), 60) == 60  # never longer than the rescan


def test_a_schedule_that_never_elapses_again_is_never_due():
    plan = Plan(calendar=lambda schedule, after: None)
    plan.update({"once": "2020-01-01"}, T0)
    assert plan.due(T0 + timedelta(days=9999)) == [] and plan.wait(T0, 42) == 42


def directories(tmp_path: Path) -> Path:
    """The scheduler's jobs directory and the run directory the fake loopd listens in."""
    (tmp_path / "run").mkdir()
    (tmp_path / "jobs").mkdir()
    return tmp_path / "jobs"


@contextlib.contextmanager
def real_scheduler(tmp_path: Path, *args: str) -> Iterator[Path]:
    """``bxctl scheduler`` over ``tmp_path/jobs`` until the block ends; yields its log file."""
    config = tmp_path / "config.toml"
    config.write_text(f'[paths]\nhome = "{tmp_path}/home"\nrun = "{tmp_path}/run"\n'
                      f'[broker]\njobs = "{tmp_path / "jobs"}"\n')
    log_path = tmp_path / "scheduler.log"
    with log_path.open("wb") as log:
        scheduler = subprocess.Popen([BXCTL, "scheduler", "--config", str(config), *args],
                                     stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            yield log_path
        finally:
            os.killpg(scheduler.pid, signal.SIGTERM)
            scheduler.wait(timeout=30)


def wait_for_turns(loopd: FakeLoopd, count: int) -> None:
    deadline = time.monotonic() + 120  # a bound on waiting, not a speed check
    while len(loopd.turns) < count and time.monotonic() < deadline:
        time.sleep(0.2)


@needs_systemd_analyze
def test_a_real_scheduler_runs_bxctl_job_run_on_schedule(tmp_path):
    """Every 2 seconds by systemd's calendar: the fake loopd sees the job's turns, each on a
    new background session, and none before the scheduler started."""
    jobs = directories(tmp_path)
    (jobs / "tick.toml").write_text('ask = "What time is it?"\nschedule = "*:*:0/2"\n')
    (jobs / "broken.toml").write_text('ask = "x"\nschedule = "every morning"\n')
    with FakeLoopd(tmp_path / "run" / "loop.sock", [[done("It is morning.")]] * 2) as loopd, \
            real_scheduler(tmp_path) as log:
        wait_for_turns(loopd, 2)
    text = log.read_text()
    assert len(loopd.turns) == 2, text
    assert [t.content for t in loopd.turns] == ["What time is it?"] * 2
    assert all(t.session.startswith("job-tick-") and t.session_kind == "background"
               and not t.resume for t in loopd.turns)
    assert loopd.turns[0].session != loopd.turns[1].session
    assert "job tick exited 0" in text and "It is morning." in text
    assert "schedule 'every morning' is not run" in text or "job broken refused" in text


@needs_systemd_analyze
def test_a_job_added_while_it_runs_is_picked_up_without_waiting_for_the_rescan(tmp_path):
    """The full rescan is an hour away: only the look at the directory's files can find the
    job written after the scheduler said ready."""
    jobs = directories(tmp_path)
    with FakeLoopd(tmp_path / "run" / "loop.sock", [[done("Hello.")]]) as loopd, \
            real_scheduler(tmp_path, "--rescan", "3600") as log:
        deadline = time.monotonic() + 60  # a bound on waiting, not a speed check
        while "scheduling 0 job(s)" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        (jobs / "late.toml").write_text('ask = "Hello?"\nschedule = "*:*:0/2"\n')
        wait_for_turns(loopd, 1)
    assert [t.content for t in loopd.turns] == ["Hello?"], log.read_text()
