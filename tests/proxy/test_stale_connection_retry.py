"""loopd's inference client sends an idempotent request (a GET, or a POST that only computes:
tokenize, apply the template) once more when it met a connection the server had closed, and
nothing else: a completion is not repeated, and a second failure is reported."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from bxcore.config import InferenceSection
from loopd.inference import InferenceClient
from loopd.inference.errors import Unavailable

DISCONNECTED = httpx.RemoteProtocolError("Server disconnected without sending a response.")


def client_failing(times: int, error: Exception = DISCONNECTED) -> tuple[InferenceClient, list]:
    """A client whose first ``times`` requests meet a dead connection; then the server answers."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if len(seen) <= times:
            raise error
        return httpx.Response(200, json={"total_slots": 2})

    return InferenceClient(InferenceSection(), transport=httpx.MockTransport(handler)), seen


@pytest.mark.parametrize(
    "error",
    [
        DISCONNECTED,
        httpx.ReadError("Connection reset by peer"),
        httpx.WriteError("Broken pipe"),
    ],
)
def test_a_get_on_a_dead_connection_is_sent_once_more(error):
    client, seen = client_failing(1, error)
    assert asyncio.run(client.get_json("/props")) == {"total_slots": 2}
    assert seen == ["GET /props", "GET /props"]


def test_a_get_that_fails_twice_is_reported_as_unavailable():
    client, seen = client_failing(2)
    with pytest.raises(Unavailable, match="GET /props: RemoteProtocolError"):
        asyncio.run(client.get_json("/props"))
    assert seen == ["GET /props", "GET /props"]


@pytest.mark.parametrize("path", ["/tokenize", "/apply-template", "/detokenize"])
def test_a_post_that_only_computes_is_sent_once_more(path):
    client, seen = client_failing(1)
    assert asyncio.run(client.post_json(path, {"content": "hi"})) == {"total_slots": 2}
    assert seen == [f"POST {path}", f"POST {path}"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/chat/completions/control"])
def test_a_post_that_changes_the_servers_state_is_never_sent_twice(path):
    client, seen = client_failing(1)
    with pytest.raises(Unavailable, match=f"POST {path}"):
        asyncio.run(client.post_json(path, {"content": "hi"}))
    assert seen == [f"POST {path}"]


def test_a_timeout_is_not_mistaken_for_a_dead_connection():
    client, seen = client_failing(1, httpx.ReadTimeout("timed out"))
    with pytest.raises(Unavailable, match="timed out"):
        asyncio.run(client.get_json("/props"))
    assert seen == ["GET /props"]
