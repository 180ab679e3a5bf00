"""On the real stack (``bxctl up``: llama-server in router mode with the tiny Qwen, inferproxy,
memoryd, brokerd with a real sandbox, loopd, and the scheduler):

- a scheduled job in ``<state>/jobs/`` is run by ``bxctl scheduler`` when its schedule elapses,
  as a new session on the background slot, answered by the real model;
- a ``delegate`` call made by the real model reaches brokerd, which allows it by grant; loopd runs
  the child on the background slot with its own log and baseline, and the child's answer comes
  back as the call's result, labelled with the child's taint (it starts with the parent's:
  the parent has read a private note first), which brokerd records for the parent too.

The tiny model does not pick tools by itself reliably, so the tool turns pass ``tool_choice``
(required for the call, none for the answer), as tests/loop/test_real_stack.py does.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bxcore.records import Assistant, SessionStart, ToolResult
from bxcore.taint import read_taint
from loopd.store import SessionStore
from support.bxctl import bxctl
from support.llama import llama_paths, require_llama

pytestmark = pytest.mark.real_server

NOTE = "The spare key is under the blue flowerpot."
JOB_DELAY = 10  # seconds from writing the job to its schedule: it must not be due on writing


def grants(directory: Path, notes: Path) -> Path:
    directory.mkdir()
    (directory / "delegate.toml").write_text(
        'tools = ["delegate"]\nmode = "auto"\nclasses = ["public", "private"]\n')
    (directory / "notes.toml").write_text(
        'tools = ["fs.read"]\nmode = "auto"\nclasses = ["public", "private"]\n'
        f'result_class = "private"\n[arguments.path]\npaths = ["{notes}/**"]\n'
        f'[sandbox]\nmounts = [{{ path = "{notes}" }}]\n')
    return directory


def say(state: Path, session: str, text: str, *choices: str) -> None:
    args = ["chat", "--socket", str(state / "run" / "loop.sock"), "--session", session]
    for choice in choices:
        args += ["--tool-choice", choice]
    done = bxctl(*args, "--say", text)
    assert done.returncode == 0, done.stderr


def sessions(home: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in (home / "sessions").iterdir() if p.name.startswith(prefix))


def test_a_job_runs_by_its_schedule_and_a_subagents_answer_and_taint_reach_its_parent(tmp_path):
    require_llama()
    binary, models = llama_paths()
    state = tmp_path / "stack"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keys.md").write_text(NOTE + "\n")
    up = bxctl("up", "--no-chat", "--state", str(state), "--llama-server", str(binary),
               "--models", str(models), "--model", "qwen-tools",
               "--grants", str(grants(tmp_path / "grants", notes)))
    home = state / "home"
    try:
        assert up.returncode == 0, up.stderr
        assert "up: scheduler" in up.stderr
        # A job added while the stack runs, due once, soon (the scheduler sees a new file within
        # a second): UTC, written as systemd's calendar takes it. It runs on the background slot
        # while the parent's turns go on on the main one.
        when = (datetime.now(UTC) + timedelta(seconds=JOB_DELAY)).replace(microsecond=0)
        (state / "jobs" / "hello.toml").write_text(
            'ask = "Say hello in one short sentence."\n'
            f'schedule = "{when:%Y-%m-%d %H:%M:%S} UTC"\n')
        # The arguments spelled as JSON: the tiny model copies them (with the path in plain
        # words it sometimes left "path" out, and the path differs from run to run).
        say(state, "parent", f'Use call_tool to run fs.read with the argument "path": '
            f'"{notes}/keys.md".', "required", "none")
        say(state, "parent", 'Use call_tool to call the tool "delegate" with the task: '
            '"Say hello in one short sentence."', "required", "none")
        deadline = time.monotonic() + 900  # a bound on waiting for the job, not a speed check
        while not sessions(home, "job-hello-") and time.monotonic() < deadline:
            time.sleep(1)
        while "job hello exited" not in (state / "logs" / "scheduler.log").read_text() \
                and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        down = bxctl("down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    scheduler_log = (state / "logs" / "scheduler.log").read_text()

    # The job: run once by the scheduler at its time, on the background slot, answered.
    assert "job hello exited 0" in scheduler_log, scheduler_log
    (job,) = sessions(home, "job-hello-")
    start, *records = SessionStore(home).open(job).records
    assert isinstance(start, SessionStart) and start.slot == 1
    assert start.time >= f"{when:%Y-%m-%dT%H:%M:%S}"
    assert [r for r in records if isinstance(r, Assistant) and r.content]

    # The subagent: its own session on the background slot, its answer the parent's result.
    parent = SessionStore(home).open("parent").records
    read, delegated = [r for r in parent if isinstance(r, ToolResult)]
    assert NOTE in read.content and read.data_class.value == "private"
    (child,) = sessions(home, "sub-")
    child_start, *child_records = SessionStore(home).open(child).records
    assert isinstance(child_start, SessionStart) and child_start.slot == 1
    answers = [r.content for r in child_records if isinstance(r, Assistant) and r.content]
    assert answers and delegated.content == answers[-1]
    # Taint: the child started with the parent's, the result carries the child's, and brokerd
    # recorded both.
    taints = home / "broker" / "sessions"
    assert read_taint(taints, child).highest.value == "private"
    assert (delegated.data_class, delegated.untrusted) == \
        (read_taint(taints, child).highest, read_taint(taints, child).untrusted)
    calls = [c for r in parent if isinstance(r, Assistant) for c in (r.tool_calls or [])]
    assert [json.loads(c.function.arguments)["name"] for c in calls] == ["fs.read", "delegate"]
