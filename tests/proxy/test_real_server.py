"""A real llama-server request through a real inferproxy."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from bxcore.chat import UserMessage
from bxcore.config import InferenceSection
from loopd.inference import ChatRequest, InferenceClient
from support.llama import SMOL, proxied, start_single

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def smol_through_proxy():
    with start_single(SMOL) as server, proxied(server.socket) as proxy:
        yield proxy


def test_health_and_a_plain_request_pass_through(smol_through_proxy):
    transport = httpx.HTTPTransport(uds=str(smol_through_proxy))
    with httpx.Client(transport=transport, base_url="http://proxy", timeout=600) as http:
        assert http.get("/health").json() == {"status": "ok"}
        answer = http.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "Say hi."}],
                "max_tokens": 4,
            },
        ).json()
    assert answer["object"] == "chat.completion"
    assert answer["usage"]["completion_tokens"] > 0


def test_a_streamed_completion_arrives_whole_through_the_proxy(smol_through_proxy):
    async def stream():
        request = ChatRequest(
            messages=(UserMessage(content="Name a color."),),
            tools=(),
            slot=0,
            session="proxy",
            max_tokens=6,
        )
        events = []

        async def sink(event):
            events.append(event)

        async with InferenceClient(InferenceSection(), socket=smol_through_proxy) as client:
            return await client.chat(request, sink), events

    completion, events = asyncio.run(stream())
    assert completion.predicted_n > 0 and completion.finish_reason in ("stop", "length")
    assert any(event.type == "progress" for event in events)
