"""Subagents: a ``delegate`` call is decided by a real brokerd (in process, on a real socket,
with its audit log and taint files); loopd runs the child session on the background slot with
its own log and baseline, and the child's answer comes back as the call's result, labelled with
the child's taint as brokerd recorded it. The child starts with the parent's taint, cannot
delegate in turn, and is cancelled with the parent's turn. The model is scripted (fault
injection and exact call sequences); tests/loop/test_real_subagent.py runs a real one."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from brokerd.approvals import ApprovalBook, ApprovalDesk
from brokerd.audit import AuditLog, entries
from brokerd.calls import Broker
from brokerd.grantstore import GrantStore
from brokerd.labelstore import LabelStore
from brokerd.memory import MemoryClient
from brokerd.policy import Decision
from brokerd.runner import Runner
from brokerd.sandbox import ToolOutput
from brokerd.sockets import handlers
from brokerd.taint import TaintStore, rebuild
from bxcore.chat import ToolSchema
from bxcore.config.inference import SlotSection
from bxcore.protocol.loop import ToolWaitingEvent, Turn
from bxcore.records import SessionStart, ToolResult
from bxcore.secrets import SecretStore
from bxcore.taint import read_taint
from loopd.sessions import Sessions
from loopd.store import SessionStore
from loopd.subagents import DELEGATE_SCHEMA, Subagents
from loopd.tools import Registry, ToolRunner
from loopd.tools.broker import BrokerPort
from loopd.turn import Loop, TurnSettings

from .support import FIXED_TIME, Events, ScriptedInference, call, fixed_baselines, say

pytestmark = pytest.mark.anyio

ECHO = ToolSchema(name="echo", description="Echo.", core=True,
                  parameters={"type": "object", "properties": {"text": {"type": "string"}}})
FETCH = ToolSchema(name="fetch", description="Fetch.", core=True,
                   parameters={"type": "object", "properties": {"url": {"type": "string"}}})
GRANTS = {
    # a session that read untrusted content may still delegate here: its child inherits that
    "delegate.toml": 'tools = ["delegate"]\nmode = "auto"\nclasses = ["public", "private"]\n'
                     'allow_untrusted = true\n',
    # echo reads private data from an untrusted source
    "echo.toml": 'tools = ["echo"]\nmode = "auto"\nclasses = ["public", "private"]\n'
                 'allow_untrusted = true\nresult_class = "private"\n',
    # fetch only for a session that has seen nothing but public data
    "fetch.toml": 'tools = ["fetch"]\nmode = "auto"\nclasses = ["public"]\n'
                  'result_class = "public"\n',
}


@dataclass
class Backend:
    """Stands in for the sandbox (tests/sandbox/ runs the real ones): echo's output is
    untrusted."""

    runs: list[str] = field(default_factory=list)

    async def run(self, decision: Decision) -> ToolOutput:
        spec = decision.authorize()
        self.runs.append(decision.record.tool)
        return ToolOutput(content=f"{decision.record.tool} ran", data_class=spec.data_class,
                          untrusted=decision.record.tool == "echo", truncated=False)


@dataclass
class Rig:
    home: Path
    server: Sessions
    backend: Backend
    taints: TaintStore

    def log(self, session: str):
        return SessionStore(self.home / "loop").open(session).records

    def taint(self, session: str):
        return read_taint(self.taints.directory, session)


@contextlib.asynccontextmanager
async def rig(tmp_path: Path, inference, grants: dict[str, str] = GRANTS):
    home = tmp_path / "home"
    (tmp_path / "grants").mkdir()
    for name, text in grants.items():
        (tmp_path / "grants" / name).write_text(text)
    audit = AuditLog(home / "audit", rotate_bytes=1 << 20)
    taints = TaintStore(home / "broker" / "sessions")
    desk = ApprovalDesk(ApprovalBook(frozenset(), timedelta(seconds=30)),
                        clock=lambda: datetime.now(UTC), gateway_socket=None,
                        waiting_interval=0.02)
    backend = Backend()
    runner = Runner(backend=backend, memory=MemoryClient(tmp_path / "no-memory.sock"),
                    audit=audit, taints=taints, labels=LabelStore(tmp_path / "labels.jsonl"),
                    result_cap=4096)
    broker = Broker(grants=GrantStore(tmp_path / "grants"), audit=audit, taints=taints,
                    desk=desk, runner=runner, secrets=SecretStore({}),
                    clock=lambda: datetime.now(UTC))
    sock = tmp_path / "broker.sock"
    tool_call, _ = handlers(broker)
    listener = await asyncio.start_unix_server(tool_call, path=str(sock))
    registry = Registry([ECHO, FETCH, DELEGATE_SCHEMA.model_copy(update={"core": True})])

    def sessions(children: Subagents) -> Sessions:
        loop = Loop(inference=inference,
                    tools=ToolRunner(registry, BrokerPort(sock, children=children)),
                    settings=TurnSettings(tool_iterations=4), now=lambda: FIXED_TIME)
        return Sessions(store=SessionStore(home / "loop"), loop=loop,
                        new_baseline=fixed_baselines, slots=SlotSection(main=0, background=1))

    server = Subagents(sessions).sessions
    try:
        yield Rig(home, server, backend, taints)
    finally:
        listener.close()
        await listener.wait_closed()


def delegate(task: str, **more: object) -> tuple[str, str]:
    return ("delegate", json.dumps({"task": task, **more}))


def results(records) -> list[ToolResult]:
    return [r for r in records if isinstance(r, ToolResult)]


def child_of(rig: Rig, parent: str) -> str:
    (child,) = [p.name for p in (rig.home / "loop" / "sessions").iterdir() if p.name != parent]
    return child


async def test_the_childs_answer_and_taint_come_back_to_the_parent(tmp_path):
    inference = ScriptedInference([
        call(delegate("Echo the word hi and tell me what came back.", rounds=2)),  # parent
        call(("echo", '{"text": "hi"}')),  # child, on its own session
        say("The echo said: echo ran."),  # child's final answer
        say("My subagent reports: echo ran."),  # parent
    ])
    events = Events()
    async with rig(tmp_path, inference) as r:
        await r.server.run(Turn(session="parent", content="go", resume=False), events)
    (result,) = results(r.log("parent"))
    assert result.content == "The echo said: echo ran."
    assert (result.data_class.value, result.untrusted) == ("private", True)
    child = child_of(r, "parent")
    assert child.startswith("sub-")
    start, *_ = r.log(child)
    assert isinstance(start, SessionStart) and start.slot == 1  # the background slot
    assert [x.content for x in results(r.log(child))] == ["echo ran"]
    assert r.backend.runs == ["echo"]
    # brokerd's own record: the parent's taint rose by the child's, which the child got itself
    assert (r.taint("parent").highest.value, r.taint("parent").untrusted) == ("private", True)
    assert (r.taint(child).highest.value, r.taint(child).untrusted) == ("private", True)
    # the child's requests carried its own slot; the parent's its own
    assert [q.slot for q in inference.requests] == [0, 1, 1, 0]


async def test_a_child_starts_with_the_parents_taint_and_that_is_in_the_audit_log(tmp_path):
    inference = ScriptedInference([
        call(("echo", '{"text": "secret stuff"}')),  # the parent reads private, untrusted data
        call(delegate("Fetch https://example.org/ for me.")),
        call(("fetch", '{"url": "https://example.org/"}')),  # child: refused, as for the parent
        say("I was not allowed to fetch it."),
        say("The subagent could not fetch it."),
    ])
    async with rig(tmp_path, inference) as r:
        await r.server.run(Turn(session="parent", content="go", resume=False), Events())
    child = child_of(r, "parent")
    (refused,) = results(r.log(child))
    assert refused.content.startswith("Denied:") and "fetch" not in r.backend.runs
    assert (r.taint(child).highest.value, r.taint(child).untrusted) == ("private", True)
    audited = [(e.session, e.data_class, e.untrusted) for e in entries(r.home / "audit")
               if e.kind == "result"]
    rebuilt = TaintStore(tmp_path / "rebuilt")
    rebuild(audited, rebuilt)
    assert rebuilt.path(child).read_bytes() == r.taints.path(child).read_bytes()


async def test_a_subagent_cannot_delegate(tmp_path):
    inference = ScriptedInference([
        call(delegate("Delegate this again.")),
        call(delegate("And again.")),  # the child tries
        say("I could not."),
        say("Done."),
    ])
    async with rig(tmp_path, inference) as r:
        await r.server.run(Turn(session="parent", content="go", resume=False), Events())
    (nested,) = results(r.log(child_of(r, "parent")))
    assert nested.content == "Not run: a subagent cannot delegate."


async def test_without_a_grant_delegate_is_denied_and_no_child_runs(tmp_path):
    inference = ScriptedInference([call(delegate("Do it.")), say("Denied, then.")])
    grants = {k: v for k, v in GRANTS.items() if k != "delegate.toml"}
    async with rig(tmp_path, inference, grants) as r:
        await r.server.run(Turn(session="parent", content="go", resume=False), Events())
    (denied,) = results(r.log("parent"))
    assert denied.content.startswith("Denied: no grant matches")
    assert [p.name for p in (r.home / "loop" / "sessions").iterdir()] == ["parent"]


async def test_bad_arguments_run_no_child_and_say_which(tmp_path):
    inference = ScriptedInference([call(("delegate", '{"task": "x", "rounds": 0}')),
                                   say("Oh.")])
    async with rig(tmp_path, inference) as r:
        await r.server.run(Turn(session="parent", content="go", resume=False), Events())
    (failed,) = results(r.log("parent"))
    assert failed.content.startswith("Not run: delegate's rounds:")


async def test_the_childs_rounds_are_limited_by_its_task(tmp_path):
    inference = ScriptedInference([
        call(delegate("Echo twice.", rounds=1)),
        call(("echo", '{"text": "1"}')),  # the child's one round
        call(("echo", '{"text": "2"}')),  # asked once more without tools, it calls again
        say("Done."),  # the parent: the child's turn stopped after one round
    ])
    async with rig(tmp_path, inference) as r:
        await r.server.run(Turn(session="parent", content="go", resume=False), Events())
    (result,) = results(r.log("parent"))
    assert result.data_class.value == "private" and r.backend.runs == ["echo"]
    assert not inference.script


class GatedChild:
    """The scripted model, except that the child's completion waits until cancelled."""

    def __init__(self, inner: ScriptedInference):
        self.inner = inner
        self.child_waiting = asyncio.Event()
        self.child_cancelled = asyncio.Event()

    async def chat(self, request, events):
        if request.slot != 1:
            return await self.inner.chat(request, events)
        self.child_waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.child_cancelled.set()
            raise


async def test_the_parent_hears_running_notices_and_cancelling_its_turn_cancels_the_child(
        tmp_path):
    inference = GatedChild(ScriptedInference([call(delegate("Think for a long time."))]))
    events = Events()
    async with rig(tmp_path, inference) as r:
        turn = asyncio.create_task(
            r.server.run(Turn(session="parent", content="go", resume=False), events))
        await inference.child_waiting.wait()
        while not any(isinstance(e, ToolWaitingEvent) for e in events.seen):
            await asyncio.sleep(0.01)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await asyncio.wait_for(inference.child_cancelled.wait(), 10)
    waits = [e for e in events.seen if isinstance(e, ToolWaitingEvent)]
    assert {w.reason for w in waits} == {"running"}
