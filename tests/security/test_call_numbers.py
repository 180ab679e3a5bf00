"""Issue 31, the third attack's F5: a (session, call) sent twice. brokerd keys a call's open
entry and its result by (session, call); two requests with one number, the second while the
first runs, were both allowed and ran, the first's result closed both, and after a SIGKILL an
allowed call that ran had no result while ``brokerd audit verify`` said ok.

Hypothesis chooses a sequence of steps on one session against a real ``brokerd serve``
(bubblewrap): a quick call, a call that keeps running until the example ends, or a SIGKILL of
brokerd and a start, each call with a number from a small range (so numbers repeat, while the
first is running, after it ended, and across the restart).

The property: a request whose number was sent before in the session is refused with an error
frame (``bad_request``) and a ``refused`` audit record, and nothing runs; one never sent runs;
at the end every allowing decision has exactly one result, no number has two allowing
decisions, and the audit log verifies. (docs/decisions/answers-read-beneath-mounts.md)

    uv run --frozen pytest tests/security/test_call_numbers.py   (short: scripts/test)
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.errors import BoxmakerError
from faults.profile import by_profile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .flow_support import Answer, Brokerd, grant_text
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

EXAMPLES = by_profile(short=2, long=30)
STARTED_WAIT = 300.0  # a guard against a call that never starts, not a speed limit
REUSED = "was sent before"

Step = tuple[str, int]  # ("quick" | "hold" | "kill", call number)


class Rig:
    def __init__(self, brokerd: Brokerd, root: Path, tool_uid: int):
        self.brokerd, self.root = brokerd, root
        self.work = root / "work"
        self.work.mkdir()
        if os.geteuid() == 0:
            os.chown(self.work, tool_uid, tool_uid)
        (brokerd.grants / "w.toml").write_text(grant_text(
            ["shell.run"], "public", argument="cwd",
            allowed=f"paths = {json.dumps([str(self.work)])}", mounts=[(self.work, True)]))
        self.serial = 0

    def run(self, steps: list[Step]) -> str:
        """The steps on a fresh session; each answer is checked as it comes."""
        self.serial += 1
        session = f"s{self.serial}"
        sent: set[int] = set()
        holders: list[threading.Thread] = []
        go = self.work / f"go{self.serial}"
        try:
            for kind, number in steps:
                if kind == "kill":
                    self.kill_and_start()
                    continue
                fresh = number not in sent
                sent.add(number)
                if kind == "quick":
                    self.judge(self.call(session, number, "print('quick')"), fresh)
                else:
                    holders.append(self.hold(session, number, go, fresh))
        finally:
            go.touch()
            for thread in holders:
                thread.join()
        return session

    def judge(self, answer: Answer | None, fresh: bool) -> None:
        if fresh:
            assert answer is not None and answer.status == "ok", answer
        else:
            assert answer is not None and answer.status == "error", answer
            body = json.loads(answer.content)
            assert body["code"] == "bad_request" and REUSED in body["message"], body

    def hold(self, session: str, number: int, go: Path, fresh: bool) -> threading.Thread:
        started = self.work / f"started-{session}-{number}-{time.monotonic_ns()}"
        code = (f"import os, time\nopen({str(started)!r}, 'w').close()\n"
                f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n")
        said: list[Answer | None] = []
        thread = threading.Thread(target=lambda: said.append(self.call(session, number, code)))
        thread.start()
        if not fresh:  # refused at once, nothing started
            thread.join()
            self.judge(said[0], fresh)
            return thread
        deadline = time.monotonic() + STARTED_WAIT
        while not started.exists():
            assert thread.is_alive() and time.monotonic() < deadline, (said, self.brokerd.log())
            time.sleep(0.05)
        return thread

    def call(self, session: str, number: int, code: str) -> Answer | None:
        """The answer; None when brokerd went away (a SIGKILL) before it answered."""
        try:
            return self.brokerd.call(session, number, "shell.run",
                                     {"argv": ["python3", "-c", code], "cwd": str(self.work)})
        except (BoxmakerError, OSError):
            return None

    def kill_and_start(self) -> None:
        brokerd = self.brokerd
        for process in (brokerd.relay, brokerd.process):
            if process is not None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        brokerd.process = brokerd.relay = None
        for name in ("relay.sock", "broker.sock", "approve.sock"):
            (brokerd.run / name).unlink(missing_ok=True)
        brokerd.start()


def steps() -> st.SearchStrategy[list[Step]]:
    return st.lists(st.tuples(st.sampled_from(["quick", "hold", "kill"]), st.integers(1, 3)),
                    min_size=2, max_size=5)


@pytest.fixture
def rig(request) -> Iterator[Rig]:
    with serving_brokerd(request, "bubblewrap", "bx-numbers-") as (brokerd, root, tool_uid):
        yield Rig(brokerd, root, tool_uid)


def test_a_call_number_runs_once_and_every_allowed_call_has_one_result(rig: Rig):
    sessions = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(case=steps())
    @example(case=[("hold", 5), ("quick", 5), ("kill", 0), ("quick", 5)])  # the attack's F5
    def one(case: list[Step]) -> None:
        sessions.append((rig.run(case), case))

    one()
    rig.brokerd.stop()
    records = rig.brokerd.audit_records()
    for session, case in sessions:
        allowed = Counter(r["decision"]["call"] for r in records if r.get("kind") == "decision"
                          and r["decision"]["session"] == session
                          and r["decision"]["verdict"] == "allow")
        results = Counter(r["call"] for r in records
                          if r.get("kind") == "result" and r["session"] == session)
        refused = Counter(r["call"] for r in records if r.get("kind") == "refused"
                          and r.get("session") == session and REUSED in r["reason"])
        asked = Counter(number for kind, number in case if kind != "kill")
        assert allowed == results == Counter(set(asked)), (case, allowed, results)
        assert refused == asked - Counter(set(asked)), (case, refused)
    rig.brokerd.start()  # serving_brokerd stops it and verifies the log
