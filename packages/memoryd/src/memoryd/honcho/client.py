"""A small Honcho v3 client over httpx: only the calls memoryd makes.

Paths and bodies follow the official v3 OpenAPI spec (../shared/reference/honcho/). Every
library failure is translated once, here, into the HonchoError tree. The transport is injected
(httpx style), so tests hand in the fake server's transport instead of a network.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
from bxcore.secrets import Secret

from ..errors import HonchoBadResponse, HonchoRejected, HonchoUnavailable
from .sse import ChatStreamDecoder

MAX_CONTENT = 25_000  # characters per message, the spec's MessageCreate limit
PAGE_SIZE = 100
# A listing ends at its last page, at an empty page, or here: a server claiming more pages
# than this (a million messages in one session) is refused rather than paged through forever.
MAX_PAGES = 10_000


@contextlib.contextmanager
def _mapped(what: str) -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise HonchoUnavailable(f"Honcho {what}: timed out") from exc
    except TimeoutError as exc:
        raise HonchoUnavailable(f"Honcho {what}: no bytes for too long") from exc
    except httpx.TransportError as exc:
        raise HonchoUnavailable(f"Honcho {what}: {type(exc).__name__}: {exc}") from exc


def _check(response: httpx.Response, what: str) -> None:
    if response.status_code >= 500:
        raise HonchoUnavailable(f"Honcho {what}: HTTP {response.status_code}")
    if response.status_code >= 400:
        raise HonchoRejected(response.status_code, _detail(response))
    if not 200 <= response.status_code < 300:  # a redirect is not followed, 1xx is not an answer
        raise HonchoBadResponse(f"Honcho {what}: HTTP {response.status_code}")


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI's 422: [{loc, msg, ...}]
        return "; ".join(
            f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}"
            for d in detail if isinstance(d, dict)
        )
    return str(detail)[:200]


def _message(item: Any, what: str) -> dict[str, Any]:
    """A Message as the v3 spec gives it, as far as memoryd reads it: an object with a string
    ``id`` and an object (or null) ``metadata``. Anything else is the peer's fault."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not isinstance(
            item.get("metadata") or {}, dict):
        raise HonchoBadResponse(f"Honcho {what}: an item is not a Message object")
    return item


class HonchoClient:
    def __init__(self, base_url: str, key: Secret | None = None, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 request_timeout: float = 30.0, chat_liveness: float = 60.0):
        headers = {"Authorization": f"Bearer {key.reveal()}"} if key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(request_timeout), follow_redirects=False, trust_env=False,
        )
        self._liveness = chat_liveness
        self._request_timeout = request_timeout

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _json(self, method: str, path: str, what: str, *, body: Any = None,
                    params: dict[str, Any] | None = None) -> Any:
        with _mapped(what):
            response = await self._http.request(method, path, json=body, params=params)
        _check(response, what)
        try:
            return response.json()
        except ValueError:
            raise HonchoBadResponse(f"Honcho {what}: the body is not JSON") from None

    async def ensure_workspace(self, workspace: str) -> None:
        await self._json("POST", "/v3/workspaces", "workspace", body={"id": workspace})

    async def ensure_peer(self, workspace: str, peer: str) -> None:
        await self._json("POST", f"/v3/workspaces/{workspace}/peers", "peer", body={"id": peer})

    async def ensure_session(self, workspace: str, session: str,
                             peers: dict[str, dict[str, bool]]) -> None:
        await self._json("POST", f"/v3/workspaces/{workspace}/sessions", "session",
                         body={"id": session, "peers": peers})

    async def add_messages(self, workspace: str, session: str,
                           messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write 1-100 messages; returns Honcho's Message objects in the same order."""
        body = {"messages": [
            {**m, "content": m["content"][:MAX_CONTENT]} for m in messages
        ]}
        created = await self._json(
            "POST", f"/v3/workspaces/{workspace}/sessions/{session}/messages", "add messages",
            body=body,
        )
        if not isinstance(created, list) or len(created) != len(messages):
            raise HonchoBadResponse("Honcho add messages: not one Message per message sent")
        return [_message(item, "add messages") for item in created]

    async def list_messages(self, workspace: str, session: str) -> AsyncIterator[dict[str, Any]]:
        """Every message of a session, page by page (an unknown session lists nothing)."""
        page = 1
        while True:
            result = await self._json(
                "POST", f"/v3/workspaces/{workspace}/sessions/{session}/messages/list",
                "list messages", body={}, params={"page": page, "size": PAGE_SIZE},
            )
            if not isinstance(result, dict) or not isinstance(result.get("items"), list):
                raise HonchoBadResponse("Honcho list messages: not a page of messages")
            pages = result.get("pages")
            if not (pages is None or (isinstance(pages, int) and not isinstance(pages, bool))):
                raise HonchoBadResponse("Honcho list messages: 'pages' is not a number")
            if not result["items"]:
                return  # an empty page ends the listing, whatever 'pages' claims
            if pages is not None and pages > MAX_PAGES:
                raise HonchoBadResponse(f"Honcho list messages: {pages:,} pages, more than the "
                                        f"{MAX_PAGES:,} memoryd reads")
            for item in result["items"]:
                yield _message(item, "list messages")
            if page >= (pages or 0):
                return
            page += 1

    async def chat(self, workspace: str, peer: str, query: str, target: str | None = None) -> str:
        """Ask the dialectic, streaming: gives up when no byte arrives for ``chat_liveness``."""
        body: dict[str, Any] = {"query": query, "stream": True}
        if target is not None:
            body["target"] = target
        # The dialectic's first byte comes after the model has read its whole prompt: the
        # liveness timer, not the ordinary request timeout, decides how long that may take (the
        # real server's first byte took 34 s on a busy 2-core machine; request_timeout is 30).
        request = self._http.build_request(
            "POST", f"/v3/workspaces/{workspace}/peers/{peer}/chat", json=body,
            timeout=httpx.Timeout(self._request_timeout, read=None),
        )
        decoder = ChatStreamDecoder()
        with _mapped("chat"):
            response = await asyncio.wait_for(
                self._http.send(request, stream=True), self._liveness
            )
            try:
                if response.status_code >= 400:
                    await response.aread()
                    _check(response, "chat")
                chunks = response.aiter_bytes()
                while not decoder.done:
                    try:
                        chunk = await asyncio.wait_for(anext(chunks), self._liveness)
                    except StopAsyncIteration:
                        chunk = b""
                    decoder.feed(chunk)
                    if not chunk:
                        break
            finally:
                await response.aclose()
        return decoder.text
