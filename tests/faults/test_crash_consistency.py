"""Crash consistency: SIGKILL loopd, brokerd or memoryd at a chosen point of a real turn (one
that reads a granted file in a bubblewrap sandbox and writes a memory note), start it again, and
check everything the harness keeps on disk.

A crash point is a syscall that changes the disk and its count within the turn: the victim is
killed by strace just before its N-th ``fsync`` (or write, rename, ...; crashpoint.py), so a
point names one on-disk state and replays exactly. A counted turn per victim lists the points;
each trial draws one with the seeded generator (``CRASH_SEED``), and ``CRASH_POINT=role:call:N``
runs that one point alone, as a failing trial prints it.

After each kill: every session log parses (or is refused with an error naming file and line);
a turn whose ``turn_done`` the client saw is in the log; the audit chain verifies; the taint
files equal their rebuild; notes.md and the edit journal parse; and the session takes a next
turn. The short profile runs a handful of trials, the long profile (BOXMAKER_PROFILE=long) 210.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest
from support.requires import needs

from . import ledger
from .conftest import by_profile
from .crashpoint import CrashPoint, Tracer, alive, points
from .invariants import answers_in_log, assert_consistent, session_problems
from .profile import hang_guard
from .rig import directive, read_grant, scripted_rig, via_call_tool

VICTIMS = ("loopd", "brokerd", "memoryd")
TRIALS = int(os.environ.get("CRASH_TRIALS", by_profile(6, 210)))
TURN_LIMIT = 180  # seconds a traced turn may take before the trial fails as hung
# A trial: the traced turn, a restart, the next turn (each bounded), and the checks.
TRIAL_LIMIT = 3 * TURN_LIMIT

pytestmark = [pytest.mark.sandbox, needs("strace"), hang_guard(TRIALS + 4, TRIAL_LIMIT),
              pytest.mark.skipif(os.geteuid() != 0, reason="strace -p a daemon needs root")]
SEED = int(os.environ.get("CRASH_SEED", "1108"))
REPLAY = os.environ.get("CRASH_POINT")
# CRASH_SECONDS: start no trial after this many seconds (a run on a busy machine ends in time;
# the ledger says how many of the planned trials ran).
BUDGET = float(os.environ.get("CRASH_SECONDS", "0"))
# strace -f follows brokerd's children too, so a point may fall in the call's sandbox: bwrap
# killed at its write of the sandbox's PID 1 (brokerd:write:9 with the seed's plan) leaves
# brokerd waiting out the call's time limit before it answers. The read grant's limit is 10 s,
# not the default 60: no check here judges how long a call runs, and a call that hits it is
# answered and checked like any other.
READ_LIMIT = "[sandbox.limits]\ntimeout_s = 10\n"


def turn_text(rig, n: int) -> str:
    return directive(
        via_call_tool("fs.read", {"path": str(rig.granted / "a.txt")}),
        via_call_tool("memory", {"action": "note", "text": f"trial {n} read a.txt"}),
    )


def run_turn(stack, session, content, seen, errors):
    try:
        for frame in stack.turn_frames(session, content, resume=False, timeout=60):
            seen.append(frame)
    except Exception as exc:  # the victim may be loopd itself: the connection drops
        errors.append(exc)


def traced_turn(rig, session: str, content: str, victim: str, point: CrashPoint | None,
                trace_file) -> tuple[list, bool, object]:
    """One turn with ``victim`` under strace; (frames seen, whether it was killed, the calls)."""
    stack = rig.stack
    tracer = Tracer(stack.running[victim].pid, trace_file, point)
    seen, errors = [], []
    worker = threading.Thread(target=run_turn, args=(stack, session, content, seen, errors))
    worker.start()
    worker.join(timeout=TURN_LIMIT)
    assert not worker.is_alive(), f"{point or victim}: the turn hung"
    counted = tracer.stop()
    return seen, not alive(tracer.pid), counted


def resume_or_start(rig, session: str, content: str):
    """The session's next turn: resumed if it exists, else started (the kill came first)."""
    exists = (rig.stack.home / "sessions" / session).is_dir()
    return rig.stack.turn(session, content, resume=exists)[-1]


def crash_points(rig, traces) -> dict[str, list[CrashPoint]]:
    """Count one whole turn's disk-changing calls in each victim: the points a trial draws."""
    offered = {}
    for victim in VICTIMS:
        seen, killed, counted = traced_turn(rig, f"count-{victim}", turn_text(rig, 0), victim,
                                            None, traces / f"count-{victim}.strace")
        assert not killed and seen[-1].kind == "turn_done", (victim, seen[-1:])
        offered[victim] = points(victim, counted)
        assert offered[victim], f"{victim} changed nothing on disk in a whole turn"
    return offered


def crash_trial(rig, trial: int, point: CrashPoint, traces) -> tuple[str, bool]:
    """Kill at ``point`` during a turn, restart, check; (the outcome, whether the client saw the
    turn's ``turn_done`` before the kill). The outcomes: ``recovered`` (killed, and everything
    on disk holds and the session goes on), ``point not reached`` (the turn made fewer such calls
    than the counted one; its victim is restarted after it and checked the same), ``refused as
    corrupt`` (the session log does not open: loopd's error names file and line, but the session
    is lost to the owner, so it is reported, never counted as a pass)."""
    stack = rig.stack
    session = f"crash{trial}"
    seen, killed, _ = traced_turn(rig, session, turn_text(rig, trial), point.role, point,
                                  traces / f"trial{trial}.strace")
    stack.kill(point.role)  # reaps the killed one; a survivor dies after its turn
    stack.start(point.role)
    staging = sorted(p.name for p in (stack.home / "sessions").glob(".new-*"))
    assert staging == [], f"a session's staging directory outlived loopd's start: {staging}"

    where = f"trial {trial}, CRASH_POINT={point}"
    assert_consistent(stack.config, stack.home)
    acknowledged = bool(seen) and seen[-1].kind == "turn_done"
    if acknowledged:
        assert seen[-1].body["content"] in answers_in_log(stack.home, session), where
    if session in session_problems(stack.home):
        return "refused as corrupt", acknowledged
    after = resume_or_start(rig, session, "hello again")
    assert after.kind == "turn_done", (where, after, stack.log("loopd"))
    assert_consistent(stack.config, stack.home)
    return ("recovered" if killed else "point not reached"), acknowledged


def test_sigkill_at_each_kind_of_crash_point_leaves_consistent_state(short_dir):
    rng = random.Random(SEED)
    traces = short_dir / "traces"
    traces.mkdir()
    tally = {victim: 0 for victim in VICTIMS}
    outcomes: Counter[str] = Counter()
    acknowledged = 0
    failed = ""
    started = time.monotonic()
    limited = read_grant(short_dir / "granted") + READ_LIMIT
    with scripted_rig(short_dir, grants={"read.toml": limited}) as rig:
        warm = rig.stack.turn("warm", turn_text(rig, 0), resume=False)[-1]
        assert warm.kind == "turn_done", warm
        offered = crash_points(rig, traces)
        sizes = {victim: len(found) for victim, found in offered.items()}
        plan = ([CrashPoint.parse(REPLAY)] if REPLAY else
                [rng.choice(offered[rng.choice(VICTIMS)]) for _ in range(TRIALS)])
        try:
            for trial, point in enumerate(plan, start=1):
                if BUDGET and time.monotonic() - started > BUDGET:
                    break
                try:
                    outcome, seen_done = crash_trial(rig, trial, point, traces)
                except BaseException as exc:
                    failed = f"trial {trial}, CRASH_POINT={point}: {type(exc).__name__}"
                    outcomes["failed"] += 1
                    raise
                tally[point.role] += 1
                outcomes[outcome] += 1
                acknowledged += seen_done
                ledger.record("crash", "running", trials=trial, planned=len(plan), seed=SEED,
                              outcomes=dict(outcomes), per_victim=tally, offered=sizes,
                              acknowledged=acknowledged,
                              seconds=round(time.monotonic() - started, 1))
        finally:
            ledger.record("crash", "done", trials=sum(outcomes.values()), planned=len(plan),
                          seed=SEED, replay=REPLAY or "", budget=BUDGET, outcomes=dict(outcomes),
                          per_victim=tally, offered=sizes, acknowledged=acknowledged,
                          failed=failed, seconds=round(time.monotonic() - started, 1))
    ran = sum(outcomes.values())
    print(f"crash trials: {ran} of {len(plan)} ({tally}); points offered per victim: {sizes}; "
          f"outcomes: {dict(outcomes)}; acknowledged before the kill: {acknowledged}")
    assert outcomes["point not reached"] < ran, \
        "no trial killed anything: the points are not being reached"
