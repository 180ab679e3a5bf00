"""``thinking: false`` on the real router, with the forced-open think template (qwen-think):
``chat_template_kwargs.enable_thinking`` false alone changes nothing there (the template does
not read it; measured), and the zero reasoning budget sent with it makes the server close the
block at once, so the completion has no reasoning. The same request with thinking on reasons.
"""

from __future__ import annotations

import pytest
from bxcore.chat import SystemMessage, UserMessage
from bxcore.config import InferenceSection
from loopd.inference import ChatRequest, InferenceClient
from support.llama import nonce

from .test_client import Sink

pytestmark = [pytest.mark.real_server, pytest.mark.anyio]


def ask(thinking: bool) -> ChatRequest:
    return ChatRequest(
        messages=(SystemMessage(content=f"{nonce()} Answer briefly."),
                  UserMessage(content="Name three colours.")),
        tools=(), slot=0, session="thinking", max_tokens=24, thinking=thinking,
    )


async def test_a_request_without_thinking_gets_no_reasoning(llama_router_proxy):
    section = InferenceSection(model="qwen-think", liveness_timeout=600.0,
                               sampling={"temperature": 0.0})
    async with InferenceClient(section, socket=llama_router_proxy) as client:
        thinking = await client.chat(ask(True), Sink())
        silent = await client.chat(ask(False), Sink())
    assert thinking.reasoning_content and thinking.reasoning_tokens > 0
    assert not silent.reasoning_content and silent.reasoning_tokens == 0
