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
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterator
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


async def reuse_after_the_server_closed(
    proxy: RunningProxy, keep_alive: float, transport: Traced, get: Any
) -> Any:
    """GET once (the connection is pooled), let the server close it while inferproxy is stopped,
    GET again, and continue inferproxy only after that request was sent."""
    await get()
    transport.sent.clear()
    transport.events.clear()
    os.kill(proxy.process.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(keep_alive + 1.0)  # the server's own timeout, announced above
        second = asyncio.ensure_future(get())
        await asyncio.wait_for(transport.sent.wait(), 60)
    finally:
        os.kill(proxy.process.pid, signal.SIGCONT)
    return await asyncio.wait_for(second, 60)


def test_a_plain_client_reusing_a_connection_the_server_closed_gets_no_response(stack):
    """The failure the self-test saw, reproduced: not a fault of the server or the proxy, which
    both close correctly, but of reusing a pooled connection without retrying."""
    proxy, keep_alive = stack

    async def scenario() -> None:
        transport = Traced(httpx.AsyncHTTPTransport(uds=str(proxy.socket), limits=LONG_EXPIRY))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:

            async def get() -> httpx.Response:
                return (await http.get("/props")).raise_for_status()

            with pytest.raises(httpx.RemoteProtocolError, match="Server disconnected without"):
                await reuse_after_the_server_closed(proxy, keep_alive, transport, get)

    asyncio.run(scenario())


def test_loopds_client_retries_a_get_once_on_a_connection_the_server_closed(stack):
    proxy, keep_alive = stack

    async def scenario() -> Any:
        transport = Traced(httpx.AsyncHTTPTransport(uds=str(proxy.socket), limits=LONG_EXPIRY))
        async with InferenceClient(InferenceSection(), transport=transport) as client:
            return await reuse_after_the_server_closed(
                proxy, keep_alive, transport, lambda: client.get_json("/props")
            )

    assert "default_generation_settings" in asyncio.run(scenario())


def test_loopds_client_gives_up_idle_connections_well_before_the_server_does(stack):
    """The race itself is avoided: the pool drops a connection idle for KEEPALIVE_EXPIRY, well
    within the server's keep-alive, so the second GET goes out once, on a new connection."""
    proxy, keep_alive = stack
    assert keep_alive / 2 >= KEEPALIVE_EXPIRY

    async def scenario() -> list[str]:
        transport = Traced(unix_transport(proxy.socket))  # what the client uses by default
        async with InferenceClient(InferenceSection(), transport=transport) as client:
            await reuse_after_the_server_closed(
                proxy, keep_alive, transport, lambda: client.get_json("/props")
            )
        return transport.events

    events = asyncio.run(scenario())
    assert events.count("http11.send_request_headers.started") == 1
    assert "connection.connect_unix_socket.complete" in events


def test_loopds_client_sends_a_completion_once_more_on_a_connection_the_server_closed(stack):
    """A completion request that met a closed connection got no answer at all: it goes out once
    more on a new connection, even with ``retries = 0`` (those are for what the server says)."""
    proxy, keep_alive = stack

    async def scenario() -> Any:
        transport = Traced(httpx.AsyncHTTPTransport(uds=str(proxy.socket), limits=LONG_EXPIRY))
        section = InferenceSection(retries=0, model="smol")
        ask = ChatRequest(messages=(UserMessage(content="Say hi."),), tools=(), slot=0,
                          session="keepalive", max_tokens=2, tool_choice="none")

        async def ignore(_event: Any) -> None:
            return None

        async with InferenceClient(section, transport=transport) as client:
            return await reuse_after_the_server_closed(
                proxy, keep_alive, transport, lambda: client.chat(ask, ignore)
            )

    completion = asyncio.run(scenario())
    assert completion.prompt_n + completion.cache_n > 0
