"""memoryd's sync against the real Honcho (brief, Memory items 4 and 5; issue 35): the server
itself is the judge of what was stored.

Properties:
- whatever the turns and wherever memoryd crashes (before a write, or after Honcho answered
  it, with its ledger kept or lost), after a restart the real server holds every message of
  every finished turn of a clean session exactly once, and nothing else;
- entries moved by consolidate reach the identity session; an unchanged source is not read.

The server down and frozen: test_honcho_real_outage.py (last, as it waits for the fixture's
warm-up chat before stopping the server under it).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryd.honcho.client import MAX_CONTENT, HonchoClient
from memoryd.wiring import build

from .crashpoints import Crash
from .real_honcho import RealHoncho, new_workspace
from .support import answer, append_log, call, calling, config, result, turn, user, write_taint
from .test_honcho_reread import reads, sync_pass  # noqa: F401  (a fixture)

EXAMPLES = by_profile(short=8, long=300)
Hook = Callable[[int], Awaitable[None]]


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


class Hooked(httpx.AsyncBaseTransport):
    """The network, with hooks around each write of messages (numbered from 1): ``before``
    runs before it is sent, ``after`` once its response is read. No kept-alive connections:
    each test step runs its own event loop."""

    def __init__(self, before: Hook | None = None, after: Hook | None = None,
                 during: Hook | None = None):
        self._inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        self.before, self.after, self.during = before, after, during
        self.writes = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not (request.method == "POST" and request.url.path.endswith("/messages")):
            return await self._inner.handle_async_request(request)
        self.writes += 1
        if self.before:
            await self.before(self.writes)
        sending = asyncio.ensure_future(self._inner.handle_async_request(request))
        if self.during:
            await self.during(self.writes)
        response = await sending
        await response.aread()
        if self.after:
            await self.after(self.writes)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def honcho_toml(real: RealHoncho, workspace: str, *, batch: int = 50,
                request_timeout: float = 30.0, extra: str = "") -> str:
    return f"""
[memory.honcho]
url = "{real.url}"
workspace = "{workspace}"
batch = {batch}
request_timeout = {request_timeout}
chat_liveness = 300
[[memory.honcho.workspaces]]
id = "{workspace}"
trusted = true
{extra}"""


@contextlib.contextmanager
def service(home: Path, real: RealHoncho, workspace: str, transport: Hooked | None = None,
            **settings_: Any) -> Iterator[Any]:
    cfg = config(home, honcho_toml(real, workspace, **settings_))
    honcho = cfg.memory.honcho
    assert honcho is not None
    client = HonchoClient(real.url, transport=transport or Hooked(),
                          request_timeout=honcho.request_timeout,
                          chat_liveness=honcho.chat_liveness)
    svc = build(cfg, honcho=client)
    try:
        yield svc
    finally:
        run(svc.aclose())


def stored(real: RealHoncho, workspace: str) -> dict[str, tuple[str, str, str]]:
    """bx_key -> (session, peer, content) of what the real server holds; every key once."""
    messages = real.messages(workspace)
    keys = Counter(m["metadata"].get("bx_key") for m in messages)
    twice = {k: n for k, n in keys.items() if n > 1}
    assert not twice, f"written more than once: {twice}"
    return {m["metadata"]["bx_key"]: (m["session_id"], m["peer_id"], m["content"])
            for m in messages}


def as_stored(text: str) -> str:
    """What the real server keeps of a message memoryd sent: memoryd cuts it to the limit,
    the server drops NUL characters (PostgreSQL text cannot hold them)."""
    return text[:MAX_CONTENT].replace("\x00", "")


def settle(svc: Any, passes: int = 3) -> None:
    for _ in range(passes):
        report = run(svc.sync.sync_once())
        if report.outage is None and report.pending == 0:
            return
    raise AssertionError(f"the sync did not settle: {report}")


# -- turn sequences and what the server must end up holding -------------------------------------

KINDS = ("plain", "tool", "untrusted", "secret", "long")


@dataclass(frozen=True)
class Turn:
    kind: str
    text: str
    finished: bool


TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30)
TURNS = st.lists(st.builds(Turn, st.sampled_from(KINDS), TEXT, st.booleans()), max_size=4)


def write_session(home: Path, session: str, turns: list[Turn],
                  tainted_by_broker: bool) -> dict[str, tuple[str, str, str]]:
    """Write the log as loopd does; return what must reach Honcho: the finished turns before
    the session first read untrusted or secret content, none if brokerd marked it."""
    expected: dict[str, tuple[str, str, str]] = {}
    clean = not tainted_by_broker
    for t in turns:
        question = t.text * (MAX_CONTENT // len(t.text) + 2) if t.kind == "long" else t.text
        records: list[Any] = [user(question)]
        if t.kind in ("tool", "untrusted", "secret"):
            records += [calling(), result("tool output", "secret" if t.kind == "secret"
                                          else "public", untrusted=t.kind == "untrusted")]
        clean = clean and t.kind not in ("untrusted", "secret")
        if t.finished:
            records.append(answer(f"answer to {t.text}"))
        first = append_log(home, session, 0, records)
        if t.finished and clean:
            last = first + len(records) - 1
            expected[f"{session}/0#{first}"] = (session, "owner", as_stored(question))
            expected[f"{session}/0#{last}"] = (session, "agent", as_stored(f"answer to {t.text}"))
    if tainted_by_broker:
        write_taint(home, session, ["public"], untrusted=True)
    return expected


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sessions=st.lists(st.tuples(TURNS, st.booleans()), min_size=1, max_size=3),
       crash_at=st.integers(min_value=1, max_value=6), after=st.booleans(),
       ledger_lost=st.booleans())
def test_after_a_crash_anywhere_the_real_server_holds_each_clean_finished_turn_once(
        real_honcho, sessions, crash_at, after, ledger_lost):
    workspace = new_workspace(real_honcho)
    home = Path(tempfile.mkdtemp(prefix="bx-honcho-home-"))
    try:
        expected: dict[str, tuple[str, str, str]] = {}
        for i, (turns, tainted) in enumerate(sessions):
            expected |= write_session(home, f"s{i}", turns, tainted)

        async def crash(n: int) -> None:
            if n == crash_at:
                raise Crash
        hooked = Hooked(after=crash) if after else Hooked(before=crash)
        with (service(home, real_honcho, workspace, hooked, batch=1) as first,
              contextlib.suppress(Crash)):
            run(first.sync.sync_once())
        if ledger_lost:
            (home / "index" / "state.sqlite").unlink()
        with service(home, real_honcho, workspace) as restarted:
            settle(restarted)
        assert stored(real_honcho, workspace) == expected
    finally:
        shutil.rmtree(home, ignore_errors=True)


# -- consolidation and the re-read skip ---------------------------------------------------------

def test_entries_moved_by_consolidate_reach_the_identity_session(real_honcho, tmp_path):
    workspace = new_workspace(real_honcho)
    with service(tmp_path, real_honcho, workspace) as svc:
        run(call(svc, "memory", {"action": "add", "file": "user.md", "text": "likes tea"}))
        run(call(svc, "memory", {"action": "consolidate", "file": "user.md",
                                 "plan": [{"entry": 0, "fate": "moved"}]}))
        settle(svc)
    assert list(stored(real_honcho, workspace).values()) == [("bx-identity", "agent",
                                                              "likes tea")]


def test_an_unchanged_settled_source_is_not_read_again(real_honcho, tmp_path,
                                                      reads):  # noqa: F811
    workspace = new_workspace(real_honcho)
    with service(tmp_path, real_honcho, workspace) as svc:
        run(turn(svc, tmp_path, "s1", [user("q1"), answer("a1")]))
        run(turn(svc, tmp_path, "s2", [user("q2"), answer("a2")]))
        report, read = sync_pass(svc, reads)
        assert report.written == 4 and read == {"s1": 1, "s2": 1, "notes.md": 1}
        report, read = sync_pass(svc, reads)
        assert read == {} and (report.read, report.skipped, report.written) == (0, 3, 0)
        run(turn(svc, tmp_path, "s1", [user("q3"), answer("a3")]))
        report, read = sync_pass(svc, reads)
        assert read == {"s1": 1} and report.written == 2
    assert len(stored(real_honcho, workspace)) == 6
