"""Load: 50 sessions at once through the real ``loopd serve`` (with the real inferproxy) against
the scripted model, the sessions split over the main and the background slot, so every request
queues behind others on its slot (loopd's slot gate; the model, like llama-server, serves one
request per slot at a time).

memoryd runs too (loopd asks it for the identity of each new session and reports each turn).

- No deadlock: every turn of every session ends, in ``turn_done``.
- ``session_busy`` exactly when it should be: while a probe session's turn is held inside the
  model, a second turn for that session is refused with ``session_busy`` at once; no other turn
  is ever refused.
- Memory bounded: loopd's open fds return to their idle count after each round, and its RSS
  does not grow with the number of sessions (loopd keeps at most 64 sessions open). The
  figures are printed (scripts/reliability's report lists the test's outcome and time).

Rounds of 50 new sessions: 4 in the short profile (200 sessions), 10 in the long one (500).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

from .httpserve import UnixHTTPServer
from .model import ScriptedModel
from .profile import by_profile
from .stack import FaultStack

SESSIONS = 50
ROUNDS = by_profile(4, 10)
TURNS = 2  # per session and round: a new session, then a resumed one
PROBES = 3  # sessions per round whose first turn is held in the model for the busy probe
HOLD = "HOLD-"
WAIT = 300.0  # a hang guard on one turn, not a speed check
ROLES = ("inferproxy", "memoryd", "loopd")  # a new session reads identity through memoryd


class ContendedModel:
    """The scripted model, one request at a time per slot; a request whose message says
    ``HOLD-<session>`` is held until the test releases that session."""

    def __init__(self) -> None:
        self.model = ScriptedModel()
        self.arrived: dict[str, threading.Event] = {}
        self.release: dict[str, threading.Event] = {}
        self._slots: dict[int, asyncio.Lock] = {}
        self.per_slot: Counter[int] = Counter()

    def expect(self, session: str) -> None:
        self.arrived[session] = threading.Event()
        self.release[session] = threading.Event()

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return await self.model.handle(request)
        body = json.loads(request.content)
        slot = body.get("id_slot", -1)
        lock = self._slots.setdefault(slot, asyncio.Lock())
        assert not lock.locked(), f"two requests at once on slot {slot}: loopd's gate failed"
        async with lock:
            self.per_slot[slot] += 1
            text = json.dumps(body["messages"][-1])
            held = next((s for s in self.arrived if f"{HOLD}{s}" in text), None)
            if held is not None and not self.release[held].is_set():
                self.arrived[held].set()
                await asyncio.to_thread(self.release[held].wait, WAIT)
            response = await self.model.handle(request)
            content = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=content)


def loopd_figures(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open fds) of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def settled_figures(pid: int, idle_fds: int) -> tuple[int, int]:
    """loopd's figures once the round's connections have closed (pooled keep-alive connections
    to inferproxy and turn reports to memoryd close shortly after the turns end); the fd count
    as it stands if it does not get back to ``idle_fds`` within the hang guard."""
    deadline = time.monotonic() + WAIT
    while True:
        rss, fds = loopd_figures(pid)
        if fds <= idle_fds or time.monotonic() > deadline:
            return rss, fds
        time.sleep(0.2)


def session_turns(stack: FaultStack, name: str, kind: str, first: str) -> list[str]:
    """A session's turns in order; the final frame kind of each (and its code if an error)."""
    ends = []
    for n in range(TURNS):
        end = stack.turn(name, first if n == 0 else f"turn {n} of {name}", resume=n > 0,
                         timeout=WAIT, kind=kind)[-1]
        ends.append(end.kind if end.kind == "turn_done" else f"{end.kind}:{end.body}")
    return ends


def probe_busy(stack: FaultStack, model: ContendedModel, probes: dict[str, Future]
               ) -> list[str]:
    """For each probe session, once its first turn is held in the model (in whatever order they
    get there: one held on a slot queues the others on it): a second turn, then release."""
    answers, waiting = [], list(probes)
    deadline = time.monotonic() + WAIT
    while waiting:
        held = [name for name in waiting if model.arrived[name].is_set()]
        if not held:
            ended = {name: probes[name].result() for name in waiting if probes[name].done()}
            assert not ended, f"probe turns ended before reaching the model: {ended}"
            assert time.monotonic() < deadline, f"{waiting}: no turn reached the model"
            time.sleep(0.01)
            continue
        name = held[0]
        end = stack.turn(name, "a second turn while the first runs", resume=True,
                         timeout=WAIT)[-1]
        answers.append(end.body.get("code", end.kind))
        model.release[name].set()
        waiting.remove(name)
    return answers


def run_round(stack: FaultStack, model: ContendedModel, number: int) -> Counter[str]:
    names = [f"load{number}-{i}" for i in range(SESSIONS)]
    probes = names[:PROBES]
    for name in probes:
        model.expect(name)
    with ThreadPoolExecutor(max_workers=SESSIONS + 1) as pool:
        futures = {name: pool.submit(session_turns, stack, name,
                                     "main" if i % 2 else "background",
                                     f"{HOLD}{name}" if name in probes else f"hello from {name}")
                   for i, name in enumerate(names)}
        busy = pool.submit(probe_busy, stack, model, {p: futures[p] for p in probes}
                           ).result(timeout=WAIT * 2)
        ends = Counter(end for f in futures.values() for end in f.result(timeout=WAIT * TURNS))
    assert busy == ["session_busy"] * PROBES, busy
    assert ends == Counter({"turn_done": SESSIONS * TURNS}), ends
    return ends


def test_fifty_sessions_at_once_end_every_turn_and_stay_bounded(short_dir):
    model = ContendedModel()
    with UnixHTTPServer(short_dir / "model.sock", model.handle), \
            FaultStack(short_dir, short_dir / "model.sock", roles=ROLES) as stack:
        pid = stack.running["loopd"].pid
        stack.turn("warm", "hello", resume=False)
        start_rss, start_fds = loopd_figures(pid)
        rss, fds = [], []
        for number in range(ROUNDS):
            run_round(stack, model, number)
            figures = settled_figures(pid, start_fds)
            rss.append(figures[0])
            fds.append(figures[1])
        print(f"load: {ROUNDS} rounds of {SESSIONS} sessions x {TURNS} turns; requests per slot "
              f"{dict(model.per_slot)}; loopd RSS KiB idle {start_rss}, after each round {rss}; "
              f"fds idle {start_fds}, after each round {fds}")
    assert all(count <= start_fds for count in fds), (start_fds, fds)
    # Bounded, not linear: the first round's growth (caches, 50 open sessions) is paid once;
    # each later round of 50 more sessions adds less than half that, or under 1 MiB (20 KiB a
    # session: less than one session's records and baseline held in memory).
    first_growth = rss[0] - start_rss
    later_per_round = (rss[-1] - rss[0]) / max(1, ROUNDS - 1)
    assert later_per_round < max(first_growth / 2, 1024), (start_rss, rss)
