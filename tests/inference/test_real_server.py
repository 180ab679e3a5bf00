"""The inference client against the real llama-server router, through a real inferproxy.

Prompts start with a nonce: the server's RAM prompt cache would otherwise serve a prompt seen in
an earlier run and hide the cache miss a test expects.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from bxcore.chat import SystemMessage, UserMessage
from bxcore.config import InferenceSection
from bxcore.config.inference import ServingSection
from bxcore.protocol.loop import Content, Progress, ThinkingCapped, Waiting
from bxcore.util import sha256
from loopd.inference import (
    ChatRequest,
    InferenceClient,
    OverBudget,
    SessionFull,
    cache_outcome,
    check_budget,
    count_baseline_tokens,
    self_test,
)
from loopd.inference.passed import PassedProbes
from loopd.inference.selftest import PROBE_TOOL as READ_FILE
from loopd.inference.selftest import serving_checks
from loopd.inference.serving import ServingSettings, fetch_serving
from support.llama import TEMPLATES, LlamaServer, nonce, unload_model

from .test_client import Sink

pytestmark = [pytest.mark.real_server, pytest.mark.anyio]


def client(proxy: Path, model: str, **settings) -> InferenceClient:
    return InferenceClient(InferenceSection(model=model, **settings), socket=proxy)


def ask(messages, slot=0, max_tokens=12, **extra) -> ChatRequest:
    return ChatRequest(
        messages=tuple(messages),
        tools=extra.pop("tools", ()),
        slot=slot,
        session="real",
        max_tokens=max_tokens,
        **extra,
    )


async def test_progress_then_a_cache_hit_then_a_detected_loss(llama_router_proxy):
    system = SystemMessage(content=f"{nonce()} You are a terse assistant. Answer briefly.")
    turn = [system, UserMessage(content="Name three colors.")]
    async with client(llama_router_proxy, "qwen-tools") as qwen:
        sink = Sink()
        first = await qwen.chat(ask(turn), sink)
        progress = sink.of(Progress)
        assert progress, "no progress event"
        assert progress[-1].processed == progress[-1].total == first.cache_n + first.prompt_n

        turn += [first.message(), UserMessage(content="And three animals?")]
        second = await qwen.chat(ask(turn), Sink())
        assert second.cache_n >= first.slot_tokens - 4  # the whole first request, bar a few
        assert cache_outcome(first, second, qwen.section.cache_loss_ratio) is None

        changed = SystemMessage(content=f"{nonce()}{system.content[len(nonce()) :]}")
        third = await qwen.chat(ask([changed, *turn[1:]]), Sink())
    loss = cache_outcome(second, third, qwen.section.cache_loss_ratio)
    # Only what comes before the changed nonce is still cached: the template's first tokens and
    # the session's marker (inference/request.py), a small part of what the second request left.
    assert loss is not None and loss.got == third.cache_n < (second.cache_n + second.prompt_n) / 2


async def test_a_tool_call_is_parsed_with_the_bare_json_template(llama_router_proxy):
    messages = [
        SystemMessage(content=f"{nonce()} You are a file assistant."),
        UserMessage(content="Read the file README.md."),
    ]
    async with client(llama_router_proxy, "qwen-tools") as qwen:
        result = await qwen.chat(
            ask(messages, slot=1, max_tokens=48, tools=(READ_FILE,), tool_choice="required"), Sink()
        )
    assert result.finish_reason == "tool_calls"
    [call] = result.tool_calls
    assert call.function.name == "read_file" and len(call.id) >= 16
    assert isinstance(json.loads(call.function.arguments)["path"], str)


async def test_the_thinking_cap_ends_reasoning_with_the_control_call(llama_router_proxy):
    sink = Sink()
    question = UserMessage(content=f"{nonce()} Why is the sky blue? Think it through.")
    # Greedy: sampled, the tiny model now and then answers without opening a reasoning block.
    async with client(llama_router_proxy, "qwen-think", thinking_cap=3,
                      sampling={"temperature": 0}) as think:
        result = await think.chat(ask([question], max_tokens=32), sink)
    assert sink.of(ThinkingCapped) and result.thinking_capped
    assert result.reasoning_tokens < 32  # reasoning stopped well inside the budget,
    assert result.predicted_n > result.reasoning_tokens  # and generation went on past its end
    # What follows is the model's: an answer, or (seen once with this tiny model) the end of its
    # turn right after the forced end of reasoning. Either way it did not keep reasoning.
    assert result.content or result.finish_reason == "stop"


async def test_a_prompt_longer_than_the_slot_is_session_full(llama_router_proxy):
    async with client(llama_router_proxy, "smol") as smol:
        with pytest.raises(SessionFull, match="exceeds the available context size"):
            await smol.chat(ask([UserMessage(content="hello " * 2500)]), Sink())


async def test_an_unloaded_model_is_a_detected_cache_loss_and_the_next_turn_works(
    llama_router: LlamaServer, llama_router_proxy
):
    system = SystemMessage(content=f"{nonce()} You are terse. " + "Answer in one line. " * 20)
    turn = [system, UserMessage(content="Say hello.")]
    async with client(llama_router_proxy, "smol") as smol:
        first = await smol.chat(ask(turn, max_tokens=8), Sink())
        unload_model(llama_router, "smol")
        turn += [first.message(), UserMessage(content="Say goodbye.")]
        second = await smol.chat(ask(turn, max_tokens=8), Sink())
    assert cache_outcome(first, second, smol.section.cache_loss_ratio) is not None
    assert second.content is not None and second.predicted_n > 0


async def test_the_self_test_passes_and_a_wrong_record_is_named(llama_router_proxy):
    # llama-server trims the file's surrounding whitespace; the record is of what /props serves
    template = (TEMPLATES / "qwen2.5-bare-json-tools.jinja").read_text().strip().encode()
    recorded = ServingSection(
        chat_template_sha256=sha256(template),
        slot_count=2,
        per_slot_context=4096,
        speculative=False,
        kv_cache_type="f16",  # the presets set none: the router's /models shows the default
    )
    async with client(llama_router_proxy, "qwen-tools", serving=recorded) as qwen:
        report = await self_test(qwen)
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
        props, slots = await qwen.get_json("/props"), await qwen.get_json("/slots")
        models = await qwen.get_json("/models")
    wrong = client(
        llama_router_proxy,
        "qwen-tools",
        serving=ServingSection(
            per_slot_context=8192, slot_count=4, chat_template_sha256=sha256(b"other"),
            kv_cache_type="q8_0",
        ),
    )
    failed = [c.name for c in serving_checks(wrong, props, slots, models) if not c.ok]
    await wrong.aclose()
    assert failed == ["slots", "context", "chat_template", "kv_cache"]


async def test_the_probe_is_generated_once_per_server_model_and_template(
    llama_router, llama_router_proxy, tmp_path
):
    """``loopd serve``'s self-test with a record of passed probes: a later start on the same
    server, model and sampling sends no chat request, also after the router launched the model
    again (on a port of its choosing). What makes a new key: tests/loop/test_passed_probes.py."""
    passed = PassedProbes(tmp_path / "selftest-passed.json")
    chats: list[str] = []
    async with client(llama_router_proxy, "qwen-tools") as qwen:
        chat = qwen.chat

        async def counting(request, sink):
            chats.append(request.session)
            return await chat(request, sink)

        qwen.chat = counting  # type: ignore[method-assign]
        first = await self_test(qwen, passed)
        sent_first = len(chats)
        unload_model(llama_router, "qwen-tools")
        second = await self_test(qwen, passed)
    assert first.ok and second.ok, (first.describe(), second.describe())
    assert sent_first == 2 and first.checks[0].detail.startswith("read_file(")
    assert [c.detail.startswith("passed on this server") for c in second.checks[:3]] == [True] * 3
    assert len(chats) == 2, second.describe()  # the second start sent none


async def test_the_serving_settings_are_read_from_the_real_router(llama_router_proxy):
    """Serving settings (docs/design.md): what a session records at its start. Router /models gives
    the launch arguments, so the KV cache type is known (f16: the presets set none)."""
    template = (TEMPLATES / "qwen2.5-bare-json-tools.jinja").read_text().strip().encode()
    async with client(llama_router_proxy, "qwen-tools") as qwen:
        settings = await fetch_serving(qwen)
    assert settings == ServingSettings(
        chat_template_sha256=sha256(template), kv_cache_type="f16/f16", speculative=False,
        slot_count=2, per_slot_context=4096,
    )


async def test_the_baseline_is_counted_by_the_servers_tokenizer(llama_router, llama_router_proxy):
    system = "You are Boxmaker, a personal agent. Be direct and brief."
    async with client(llama_router_proxy, "qwen-tools") as qwen:
        report = await count_baseline_tokens(qwen, system, (READ_FILE,))
    independent = llama_router.post(
        "/v1/chat/completions/input_tokens",
        {
            "model": "qwen-tools",
            "messages": [{"role": "system", "content": system}],
            "tools": [READ_FILE.as_openai_tool()],
        },
    ).json()["input_tokens"]
    assert report.tokens == independent and report.ok
    async with client(llama_router_proxy, "qwen-tools", baseline_budget=20) as small:
        with pytest.raises(OverBudget, match=f"{report.tokens} tokens, OVER the budget of 20"):
            await check_budget(small, system, (READ_FILE,))


async def test_a_request_queued_behind_another_client_on_its_slot_is_told_so(llama_router_proxy):
    """Another client (another process's gate) holds slot 0: the server sends nothing until the
    slot is free, and the client reports ``waiting {slot_busy: true}`` meanwhile."""
    long_answer = ask(
        [UserMessage(content=f"{nonce()} Count from 1 to 100, one per line.")], max_tokens=64
    )
    other, ours = Sink(), Sink()
    async with (
        client(llama_router_proxy, "smol") as other_client,
        client(llama_router_proxy, "smol", waiting_notice=0.05) as our_client,
    ):
        running = asyncio.create_task(other_client.chat(long_answer, other))
        while not other.of(Content):
            await asyncio.sleep(0.01)
        mine = await our_client.chat(ask([UserMessage(content=f"{nonce()} Say hi.")]), ours)
        await running
    assert ours.events[0] == Waiting(slot_busy=True)
    assert mine.predicted_n > 0
