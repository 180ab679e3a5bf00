"""Shared pieces for brokerd's tests: grant files in a temp dir, a scripted sandbox backend,
and a Broker wired the way ``brokerd serve`` wires it (real audit log, taint files, sockets)."""

from __future__ import annotations

import asyncio
import textwrap
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from brokerd.approvals import ApprovalBook, ApprovalDesk
from brokerd.audit import AuditLog
from brokerd.calls import Broker
from brokerd.grantstore import GrantStore
from brokerd.labelstore import LabelStore
from brokerd.memory import MemoryClient
from brokerd.policy import Decision
from brokerd.runner import Runner
from brokerd.sandbox import SandboxSpec, ToolOutput
from brokerd.taint import TaintStore
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import approval as approval_wire
from bxcore.protocol import broker as broker_wire
from bxcore.secrets import SecretStore
from bxcore.tools import ToolRequest
from support.brokerd import start

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ASK = 'tools = ["echo"]\nmode = "ask"\nclasses = ["public"]\nresult_class = "public"\n'


@dataclass
class ScriptedBackend:
    """Stands in for bubblewrap/podman (tested in tests/sandbox/): takes the spec out of the
    Decision exactly as a real backend must, records it, and answers as scripted."""

    content: str = "done"
    untrusted: bool = False
    delay: float = 0.0  # seconds the call runs: past the rig's waiting_interval, notices come
    runs: list[SandboxSpec] = field(default_factory=list)

    async def run(self, decision: Decision) -> ToolOutput:
        spec = decision.authorize()
        self.runs.append(spec)
        await asyncio.sleep(self.delay)
        return ToolOutput(content=self.content, data_class=spec.data_class,
                          untrusted=self.untrusted, truncated=False)


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def request(tool: str = "fs.read", arguments: str = '{"path": "/x"}', call: int = 1,
            session: str = "s1") -> ToolRequest:
    return ToolRequest(session=session, call=call, tool=tool, arguments=arguments)


@dataclass
class Rig:
    home: Path
    grants: Path
    backend: ScriptedBackend
    broker: Broker
    book: ApprovalBook

    @property
    def audit_dir(self) -> Path:
        return self.home / "audit"

    @property
    def taint_dir(self) -> Path:
        return self.home / "broker" / "sessions"


def make_rig(tmp_path: Path, *, approvers: frozenset[str] = frozenset({"owner"}),
             ttl: float = 30.0, gateway: Path | None = None,
             memory: Path | None = None) -> Rig:
    home = tmp_path / "home"
    grants = tmp_path / "grants"
    grants.mkdir(parents=True, exist_ok=True)
    audit = AuditLog(home / "audit", rotate_bytes=4096)
    taints = TaintStore(home / "broker" / "sessions")
    book = ApprovalBook(approvers, timedelta(seconds=ttl))
    desk = ApprovalDesk(book, clock=lambda: datetime.now(UTC), gateway_socket=gateway,
                        waiting_interval=0.05)
    backend = ScriptedBackend()
    runner = Runner(backend=backend, memory=MemoryClient(memory or tmp_path / "no-memory.sock"),
                    audit=audit, taints=taints, labels=LabelStore(home / "broker" / "labels.jsonl"),
                    result_cap=1024, clock=lambda: NOW)
    broker = Broker(grants=GrantStore(grants), audit=audit, taints=taints, desk=desk,
                    runner=runner, secrets=SecretStore({}), clock=lambda: NOW)
    return Rig(home, grants, backend, broker, book)


async def call_tool(path: Path, req) -> list[Frame]:
    stream = await FrameStream.connect(path, broker_wire.FROM_BROKERD)
    try:
        await stream.write(Frame.of(broker_wire.TOOL_CALL, req, final=True))
        frames = [await stream.read(10)]
        while not frames[-1].final:
            frames.append(await stream.read(10))
        return frames
    finally:
        await stream.close()


def answer_of(frames: list[Frame]) -> Frame:
    """The call's answer, the last frame, after the ``tool_waiting`` notices the protocol allows
    before it (one every waiting_interval while the call runs: a busy machine sends some even for
    a quick call). Anything else before the answer, or an answer that is not final, fails."""
    *notices, answer = frames
    for notice in notices:
        assert (notice.kind, notice.final) == (broker_wire.TOOL_WAITING, False), notice
        notice.parse(broker_wire.ToolWaiting)
    assert answer.final and answer.kind != broker_wire.TOOL_WAITING, answer
    return answer


async def approve_socket(path: Path, kind: str, body) -> Frame:
    stream = await FrameStream.connect(path, approval_wire.FROM_APPROVE_SOCKET)
    try:
        await stream.write(Frame.of(kind, body, final=True))
        return await stream.read(10)
    finally:
        await stream.close()


async def pending_ids(path: Path, count: int) -> list[str]:
    while True:
        frame = await approve_socket(path, approval_wire.APPROVAL_LIST, {})
        found = frame.parse(approval_wire.ApprovalPending).approvals
        if len(found) >= count:
            return [a.id for a in found]
        await asyncio.sleep(0.01)


def serve(rig: Rig, tmp_path: Path, body):
    """Run ``body(broker_socket)`` with ``rig``'s broker.sock and approve.sock served."""
    sockets = tmp_path / "broker.sock", tmp_path / "approve.sock"

    async def main():
        servers = await start(rig.broker, *sockets)
        try:
            return await body(sockets[0])
        finally:
            for server in servers:
                server.close()

    return asyncio.run(main())
