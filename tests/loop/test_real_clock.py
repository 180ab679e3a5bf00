"""The model asks ``clock`` and gets the time, on the real llama-server (the session's router, its
qwen-tools: the tiny Qwen with the bare-JSON tool template), through the real brokerd.

The whole product path of the one real tool every session has (docs/design.md, "Core tools"): the
session's tools array is exactly clock, find_tool and call_tool, whatever the registry lists;
the model's call goes through loopd's broker port to brokerd wired as ``brokerd serve`` wires it
(its grants deny everything: no grant is needed for clock), brokerd answers from its own clock,
and the audit log holds the call's decision and result. The next completion reads the time.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from brokerd.audit import entries, verify
from brokerd.wiring import backend_for, build
from bxcore.config import parse_config
from bxcore.config.inference import InferenceSection, SamplingSection
from bxcore.records import Assistant, ToolResult
from loopd.epochs import Baselines
from loopd.inference.client import InferenceClient
from loopd.memory import IdentityFiles
from loopd.store import SessionStore
from loopd.tools import Registry, ToolRunner, with_clock
from loopd.tools.broker import BrokerPort
from loopd.turn import Loop, run_turn
from support.brokerd import start
from support.llama import LlamaServer, nonce

from .support import Events

pytestmark = [pytest.mark.real_server, pytest.mark.anyio]


async def test_the_model_calls_clock_and_brokerd_answers_with_the_time(llama_router: LlamaServer):
    with tempfile.TemporaryDirectory(prefix="bx-h18-clock-") as tmp:
        root = Path(tmp)
        (root / "grants").mkdir()
        (root / "grants" / "nothing.toml").write_text('tools = ["*"]\nmode = "deny"\n')
        config = parse_config(f'[paths]\nhome = "{root}/home"\nrun = "{root}/run"\n'
                              f'[broker]\ngrants = "{root}/grants"\n', root / "c.toml", root)
        broker = build(config, backend_for(config))
        servers = await start(broker, root / "broker.sock", root / "approve.sock")
        system = root / "system.md"
        system.write_text(f"{nonce()} You are a test assistant. You have a clock tool.")
        registry = with_clock(Registry([]))
        baselines = Baselines(system=system, tools=registry.core_schemas(),
                              memory=IdentityFiles(()))
        store = SessionStore(root / "home")
        session = store.create("clock", await baselines("clock", 0, None), slot=0,
                               time="2026-12-01T00:00:00.000000Z")
        try:
            section = InferenceSection(model="qwen-tools", max_tokens=48, liveness_timeout=600.0,
                                       retries=1, sampling=SamplingSection(temperature=0.0))
            async with InferenceClient(section, socket=llama_router.socket) as client:
                loop = Loop(inference=client,
                            tools=ToolRunner(registry, BrokerPort(root / "broker.sock")))
                before = datetime.now(UTC)
                done = await run_turn(loop, session, "What time is it now? Call the clock.",
                                      Events(), tool_choice=("required", "none"))
                after = datetime.now(UTC)
        finally:
            for server in servers:
                server.close()
        audit = list(entries(root / "home" / "audit"))
        broken = verify(root / "home" / "audit")[0]

    assert [t.name for t in session.baseline.tools] == ["clock", "find_tool", "call_tool"]
    first = next(r for r in session.records if isinstance(r, Assistant))
    assert [c.function.name for c in first.tool_calls or []] == ["clock"]
    (result,) = [r for r in session.records if isinstance(r, ToolResult)]
    told = datetime.fromisoformat(result.content)  # brokerd's RFC 3339, taken during the turn
    assert before <= told <= after
    assert result.call == 1 and result.data_class == "public" and not result.untrusted
    decision, answered = audit
    assert (decision.decision.tool, decision.decision.grant) == ("clock", "builtin:clock")
    assert (answered.session, answered.call, answered.tool) == ("clock", 1, "clock")
    assert broken == []
    assert done.content  # the model answered after reading the time
