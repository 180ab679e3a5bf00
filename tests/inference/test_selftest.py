"""The startup self-test and the baseline budget, against the scriptable fake server."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from bxcore.config import InferenceSection
from bxcore.config.inference import KV_CACHE_TYPES, ServingSection
from bxcore.util import sha256
from hypothesis import given, settings
from hypothesis import strategies as st
from loopd.inference import InferenceClient, OverBudget, check_budget, self_test
from loopd.inference.selftest import serving_checks

from .fake_server import FakeServer, Reply, completion

pytestmark = pytest.mark.anyio

TEMPLATE = "{{ messages }}"
PROPS = {
    "total_slots": 2,
    "default_generation_settings": {"n_ctx": 4096},
    "chat_template": TEMPLATE,
}
SLOTS = [
    {"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": False},
    {"id": 1, "n_ctx": 4096, "speculative": False, "is_processing": False},
]
RECORDED = ServingSection(
    chat_template_sha256=sha256(TEMPLATE.encode()),
    slot_count=2,
    per_slot_context=4096,
    speculative=False,
)
TOOL_CALL = completion(
    tool_calls=(("call-1", "read_file", '{"path": "README.md"}'),), cache_n=0, prompt_n=120
)


async def run(replies, serving=RECORDED, props=PROPS, slots=SLOTS):
    fake = FakeServer(replies, props=props, slots=slots)
    section = InferenceSection(model="qwen-tools", serving=serving, retries=0)
    async with InferenceClient(section, transport=fake.transport()) as client:
        return await self_test(client), fake


def failed(report) -> list[str]:
    return [check.name for check in report.failures]


async def test_a_healthy_server_passes_every_check():
    report, fake = await run(
        [Reply.stream(TOOL_CALL), Reply.stream(completion(content="It is Boxmaker.", cache_n=137))]
    )
    assert report.ok, report.describe()
    assert [c.name for c in report.checks] == [
        "tool_call",
        "round_trip",
        "cache_hit",
        "slots",
        "context",
        "chat_template",
        "speculative",
        "kv_cache",
    ]
    first, second = fake.chat_bodies
    assert first["id_slot"] == second["id_slot"] == 1  # the background slot
    assert first["tool_choice"] == "required"
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "call-1"
    assert second["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call-1",
        "content": "# Boxmaker\nA personal agent harness.",
    }


async def test_no_parsed_tool_call_fails_the_tool_call_check():
    report, _ = await run([Reply.stream(completion(content='{"name": "read_file"}'))])
    assert failed(report) == ["tool_call"]
    assert "no tool call was parsed" in report.failures[0].detail


async def test_arguments_that_are_not_an_object_fail_the_tool_call_check():
    bad = completion(tool_calls=(("c", "read_file", '"README.md"'),))
    report, _ = await run([Reply.stream(bad)])
    assert failed(report) == ["tool_call"]


async def test_a_second_request_that_misses_the_cache_fails_cache_hit():
    report, _ = await run(
        [Reply.stream(TOOL_CALL), Reply.stream(completion(content="x", cache_n=3))]
    )
    assert failed(report) == ["cache_hit"]


async def test_serving_settings_that_differ_from_the_record_are_each_named():
    props = {
        **PROPS,
        "total_slots": 4,
        "chat_template": "other",
        "default_generation_settings": {"n_ctx": 8192},
    }
    slots = [{**slot, "n_ctx": 8192, "speculative": True} for slot in SLOTS * 2]
    report, _ = await run(
        [Reply.stream(TOOL_CALL), Reply.stream(completion(cache_n=137))], props=props, slots=slots
    )
    assert failed(report) == ["slots", "context", "chat_template", "speculative"]


async def test_a_configured_slot_the_server_lacks_fails_slots():
    report, _ = await run(
        [Reply.stream(TOOL_CALL), Reply.stream(completion(cache_n=137))],
        serving=ServingSection(),
        props={**PROPS, "total_slots": 1},
        slots=SLOTS[:1],
    )
    assert failed(report) == ["slots"]


async def test_an_unreachable_server_fails_with_the_reason():
    report, _ = await run([Reply.error(503, b'{"error":{"message":"Loading model"}}')])
    assert failed(report) == ["tool_call"]
    assert "503" in report.failures[0].detail


async def test_the_baseline_budget_uses_the_servers_template_and_tokenizer():
    fake = FakeServer([])
    fake.routes = {
        "/apply-template": {"prompt": "<|im_start|>system\nsys<|im_end|>\n"},
        "/tokenize": {"tokens": list(range(2999))},
    }
    section = InferenceSection(model="qwen-tools")
    async with InferenceClient(section, transport=fake.transport()) as client:
        report = await check_budget(client, "sys", ())
        assert report.tokens == 2999 and report.ok
        fake.routes["/tokenize"] = {"tokens": list(range(3001))}
        with pytest.raises(OverBudget, match="3001 tokens, OVER the budget of 3000"):
            await check_budget(client, "sys", ())
    path, body = fake.route_bodies[1]
    assert path == "/tokenize"
    assert body == {"model": "qwen-tools", "content": "<|im_start|>system\nsys<|im_end|>\n"}


KV_TYPES = st.sampled_from(KV_CACHE_TYPES)


@settings(max_examples=60)
@given(served=st.tuples(KV_TYPES, KV_TYPES), recorded=st.none() | st.tuples(KV_TYPES, KV_TYPES),
       listed=st.booleans())
def test_the_kv_cache_check_passes_exactly_when_the_launch_flags_match_the_record(
    served, recorded, listed
):
    """kv_cache compares the type the router's /models shows the model launched with (the
    flags as llama-server takes them) with the recorded one; a server that does not show it
    passes only when nothing is recorded."""
    args = ["--model", "m.gguf", "--cache-type-k", served[0], "-ctv", served[1]]
    models = {"data": [{"id": "qwen-tools", "status": {"args": args}}]} if listed else None
    section = InferenceSection(model="qwen-tools", serving=ServingSection(
        kv_cache_type=None if recorded is None else "/".join(recorded)))
    check = next(c for c in serving_checks(SimpleNamespace(section=section), PROPS, SLOTS, models)
                 if c.name == "kv_cache")
    expected = recorded is None or (listed and recorded == served)
    assert check.ok is expected, check.detail
