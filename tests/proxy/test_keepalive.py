"""The root cause of the self-test's "Server disconnected without sending a response", against the
real llama-server through the real inferproxy.

llama-server closes a keep-alive connection after it has been idle for its ``Keep-Alive:
timeout=5``. inferproxy passes that close on to the client, but only when it next runs; on the
shared 2-core machine that can be late. A client that reuses the pooled connection before the close
reaches it sends its request into a connection whose server side is gone, and reads EOF instead
of a response. httpx's own keep-alive expiry is 5 s too, so its pool would reuse a connection at
the very moment the server gives it up.

The tests make "late" deterministic: inferproxy is stopped (SIGSTOP) while the server closes the
idle connection, and continued only once the client has sent its request (httpcore's trace).
The four tests' clients, each on its own connections, share one such wait (``reused``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from bxcore.chat import UserMessage
from bxcore.config import InferenceSection
from loopd.inference import InferenceClient
from loopd.inference.api import ChatRequest
from loopd.inference.client import KEEPALIVE_EXPIRY, unix_transport
from support.llama import SMOL, start_single

from .harness import RunningProxy, running_proxy

pytestmark = pytest.mark.real_server
LONG_EXPIRY = httpx.Limits(keepalive_expiry=600.0)  # the pool never expires a connection itself


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[RunningProxy, float]]:
    """(the real inferproxy before a real llama-server, the server's keep-alive timeout)."""
    with start_single(SMOL) as server, running_proxy(f"unix:{server.socket}") as proxy:
        header = server.get("/health").headers.get("keep-alive", "")
        found = re.search(r"timeout=(\d+)", header)
        assert found, f"llama-server no longer announces its keep-alive timeout: {header!r}"
        yield proxy, float(found.group(1))


class Traced(httpx.AsyncBaseTransport):
    """A transport that sets ``sent`` once a request's bytes have left for the socket."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner = inner
        self.sent = asyncio.Event()
        self.events: list[str] = []  # httpcore's trace event names, in order

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async def trace(name: str, _info: dict[str, Any]) -> None:
            self.events.append(name)
            if name == "http11.send_request_body.complete":
                self.sent.set()

        request.extensions["trace"] = trace
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Client:
    """One scenario's client: its traced transport and the request it makes twice."""

    transport: Traced
    get: Callable[[], Awaitable[Any]]


async def reuse_after_the_server_closed(
    proxy: RunningProxy, keep_alive: float, clients: dict[str, Client]
) -> dict[str, Any]:
    """Each client GETs once (its connection is pooled); the server closes them all while
    inferproxy is stopped; each sends its request again, and inferproxy continues only after
    every one was sent. Each client's second answer, or the exception it ended in."""
    await asyncio.gather(*(client.get() for client in clients.values()))
    for client in clients.values():
        client.transport.sent.clear()
        client.transport.events.clear()
    os.kill(proxy.process.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(keep_alive + 1.0)  # the server's own timeout, announced above
        second = [asyncio.ensure_future(client.get()) for client in clients.values()]
        await asyncio.wait_for(asyncio.gather(
            *(client.transport.sent.wait() for client in clients.values())), 60)
    finally:
        os.kill(proxy.process.pid, signal.SIGCONT)
    answers = await asyncio.wait_for(asyncio.gather(*second, return_exceptions=True), 60)
    return dict(zip(clients, answers, strict=True))


@pytest.fixture(scope="module")
def reused(stack: tuple[RunningProxy, float]) -> dict[str, tuple[Any, list[str]]]:
    """The four clients of the tests below, each on its own connections, through one wait for
    the server's keep-alive (the wait is the tests' cost; what each client does is its own):
    name -> (its second answer or exception, its transport's trace of that request)."""
    proxy, keep_alive = stack

    async def ignore(_event: Any) -> None:
        return None

    async def scenario() -> dict[str, tuple[Any, list[str]]]:
        def pooled() -> Traced:
            return Traced(httpx.AsyncHTTPTransport(uds=str(proxy.socket), limits=LONG_EXPIRY))

        plain, retrying, chat = pooled(), pooled(), pooled()
        default = Traced(unix_transport(proxy.socket))  # what loopd's client uses by default
        async with contextlib.AsyncExitStack() as opened:
            http = await opened.enter_async_context(
                httpx.AsyncClient(transport=plain, base_url="http://proxy"))

            async def loopds(transport: Traced, section: InferenceSection) -> InferenceClient:
                return await opened.enter_async_context(
                    InferenceClient(section, transport=transport))

            async def plain_get() -> httpx.Response:
                return (await http.get("/props")).raise_for_status()

            retrying_client = await loopds(retrying, InferenceSection())
            default_client = await loopds(default, InferenceSection())
            chat_client = await loopds(chat, InferenceSection(retries=0, model="smol"))
            ask = ChatRequest(messages=(UserMessage(content="Say hi."),), tools=(), slot=0,
                              session="keepalive", max_tokens=2, tool_choice="none")
            clients = {
                "plain": Client(plain, plain_get),
                "retrying": Client(retrying, lambda: retrying_client.get_json("/props")),
                "default": Client(default, lambda: default_client.get_json("/props")),
                "chat": Client(chat, lambda: chat_client.chat(ask, ignore)),
            }
            answers = await reuse_after_the_server_closed(proxy, keep_alive, clients)
        return {name: (answers[name], clients[name].transport.events) for name in clients}

    return asyncio.run(scenario())


def test_a_plain_client_reusing_a_connection_the_server_closed_gets_no_response(reused):
    """The failure the self-test saw, reproduced: not a fault of the server or the proxy, which
    both close correctly, but of reusing a pooled connection without retrying."""
    answer, _ = reused["plain"]
    assert isinstance(answer, httpx.RemoteProtocolError), answer
    assert "Server disconnected without" in str(answer)


def test_loopds_client_retries_a_get_once_on_a_connection_the_server_closed(reused):
    answer, _ = reused["retrying"]
    assert not isinstance(answer, BaseException), answer
    assert "default_generation_settings" in answer


def test_loopds_client_gives_up_idle_connections_well_before_the_server_does(stack, reused):
    """The race itself is avoided: the pool drops a connection idle for KEEPALIVE_EXPIRY, well
    within the server's keep-alive, so the second GET goes out once, on a new connection."""
    _, keep_alive = stack
    assert keep_alive / 2 >= KEEPALIVE_EXPIRY
    answer, events = reused["default"]
    assert not isinstance(answer, BaseException), answer
    assert events.count("http11.send_request_headers.started") == 1
    assert "connection.connect_unix_socket.complete" in events


def test_loopds_client_sends_a_completion_once_more_on_a_connection_the_server_closed(reused):
    """A completion request that met a closed connection got no answer at all: it goes out once
    more on a new connection, even with ``retries = 0`` (those are for what the server says)."""
    completion, _ = reused["chat"]
    assert not isinstance(completion, BaseException), completion
    assert completion.prompt_n + completion.cache_n > 0
