"""The memory tools reach the model through find_tool and call_tool, with bxcore's schemas, and go
to the port (brokerd in production) like every tool; the tools array does not change."""

from __future__ import annotations

import json

import pytest
from bxcore.chat import FunctionCall, ToolCall, ToolSchema
from bxcore.config import parse_config
from bxcore.memory_tool import MEMORY_TOOL_SCHEMAS
from bxcore.protocol.memory import MEMORY_TOOLS
from loopd.readback import read_back
from loopd.tools import Registry, ToolRunner, with_memory_tools
from loopd.wiring import build
from support.fake_tools import FakeTools

from .support import Events, fake_registry, registry_json

pytestmark = pytest.mark.anyio


def test_memory_tools_are_found_not_core_and_keep_the_tools_array():
    registry = with_memory_tools(fake_registry())
    assert registry.core_schemas() == fake_registry().core_schemas()
    assert {"ask_memory", "memory"} <= {s.name for s in registry.search("memory")}
    found = json.loads(registry.find_tool_text("recall").splitlines()[0])
    assert found == [{"name": "recall", "description": MEMORY_TOOL_SCHEMAS[0].description,
                      "parameters": MEMORY_TOOL_SCHEMAS[0].parameters}]
    assert all(registry.is_discoverable(n) for n in ("recall", "ask_memory", "memory"))


def test_the_tools_loopd_offers_are_the_tools_brokerd_sends_to_memoryd():
    assert {schema.name for schema in MEMORY_TOOL_SCHEMAS} == MEMORY_TOOLS


def test_a_registry_file_entry_is_replaced_by_bxcores_schema_but_keeps_its_core_flag():
    listed = ToolSchema(name="recall", description="old", parameters={}, core=True)
    registry = with_memory_tools(Registry([*FakeTools.schemas, listed]))
    (recall,) = [s for s in registry.schemas() if s.name == "recall"]
    assert recall.description == MEMORY_TOOL_SCHEMAS[0].description and recall.core


async def test_call_tool_sends_a_memory_call_to_the_port():
    port = FakeTools()
    runner = ToolRunner(with_memory_tools(fake_registry()), port)
    arguments = {"name": "memory", "arguments": {"action": "note", "text": "Seen."}}
    call = ToolCall(id="c1", function=FunctionCall(name="call_tool",
                                                   arguments=json.dumps(arguments)))
    await runner.run(call, read_back(call.function.arguments), session="s1", number=3,
                     events=Events())
    (request,) = port.requests
    assert (request.tool, request.call) == ("memory", 3)
    assert json.loads(request.arguments) == {"action": "note", "text": "Seen."}


def test_the_broker_port_offers_the_memory_tools_when_memoryd_is_on(tmp_path):
    registry = tmp_path / "registry.json"
    registry.write_text(registry_json(FakeTools.schemas))
    text = f'[paths]\nhome = "{tmp_path}"\n[loop]\ntools = "broker"\nregistry = "{registry}"\n'
    role = build(parse_config(text, "c.toml", tmp_path), tmp_path / "c.toml")
    assert {"recall", "ask_memory", "memory"} <= {s.name for s in role.registry.schemas()}
    off = build(parse_config(text + 'memory = "off"\n', "c.toml", tmp_path),
                     tmp_path / "c.toml")
    assert "recall" not in {s.name for s in off.registry.schemas()}
