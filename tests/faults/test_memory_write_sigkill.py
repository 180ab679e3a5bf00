"""memoryd's writes under a real SIGKILL at every durable step.

A child process (tests/memory/crashpoints.py run as a script) sets up a memory directory, then
does one write and SIGKILLs itself in place of step ``at`` (the intent, the identity file, the
notes.md append, whole or half written, the journal entry, the intent's removal): no ``finally``
runs, no file is closed, the writer lock dies with the process. Then the owner's
``memoryd log`` (a new process) reads it, changing nothing, and memoryd is restarted as the writer
the service builds.
The files must hold exactly the state before the write or exactly the state a write without a
crash leaves, as the commit point decides, with the journal agreeing and every moved or dropped
note in notes.md exactly once if and only if the edit took effect.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from memory import crashpoints
from memory.crashpoints import CrashPoints, assert_journal_agrees, state, takes_effect

BIN = Path(sys.executable).parent
SCRIPT = Path(crashpoints.__file__)
# The identity edits that move notes out, an undo, and a note: each kind of step sequence.
CASES = [("consolidate", 5), ("accept", 5), ("undo", 5), ("note", 4)]


def reference(home: Path, op: str) -> tuple[tuple[object, ...], tuple[object, ...]]:
    crashpoints.setup(home)
    before = state(home)
    crashpoints.OPS[op](crashpoints.writer(home))
    return before, state(home)


def killed_child(home: Path, op: str, at: int, torn: bool) -> None:
    argv = [sys.executable, str(SCRIPT), str(home), op, str(at), *(["torn"] if torn else [])]
    child = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)


def owners_log(home: Path) -> subprocess.CompletedProcess[str]:
    """``memoryd log --json``, the owner's command, as a new process."""
    env = {**os.environ, "BOXMAKER_HOME": str(home)}
    env.pop("BOXMAKER_CONFIG", None)
    return subprocess.run([str(BIN / "memoryd"), "log", "--json"], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


@pytest.mark.parametrize(("op", "steps"), CASES)
def test_sigkill_at_every_step_of_a_write_then_restart(tmp_path, op, steps):
    before, after = reference(tmp_path / "reference", op)
    for at in range(steps):
        for torn in (False, True) if at == steps - 3 else (False,):  # steps - 3: the append
            home = tmp_path / f"{at}-{torn}"
            killed_child(home, op, at, torn)
            left = list((home / "memory" / "edits").glob("*.intent"))
            assert bool(left) == (at > 0)  # step 0 writes the intent, the last removes it
            killed = state(home)
            log = owners_log(home)
            assert log.returncode == 0, log.stderr
            assert state(home) == killed  # the owner's read takes no lock and repairs nothing
            fired = "memoryd.intent.append_bytes" if at == steps - 3 else None
            expected = after if takes_effect(at, fired, torn) else before
            crashpoints.writer(home)  # the service's restart finishes or drops the write
            assert state(home) == expected, (op, at, torn)
            log = owners_log(home)
            assert len(log.stdout.splitlines()) == len(expected[3])  # every entry listed
            crashpoints.writer(home)  # a second restart finds nothing left to do
            assert state(home) == expected
            assert_journal_agrees(home)


def test_the_injector_counts_the_steps_the_cases_name(tmp_path):
    for op, steps in CASES:
        home = tmp_path / op
        crashpoints.setup(home)
        w = crashpoints.writer(home)
        with pytest.MonkeyPatch.context() as patch:
            points = CrashPoints(None, crashpoints.raise_crash).install(patch.setattr)
            crashpoints.OPS[op](w)
        assert len(points.steps) == steps, (op, points.steps)
        assert points.steps[steps - 3] == "memoryd.intent.append_bytes"
