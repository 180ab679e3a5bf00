"""A thin client for the few Mattermost REST calls gatewayd makes (API v4, on httpx).

The bot token is sent as ``Authorization: Bearer``; it lives only in the httpx client's default
headers and is never logged or put in an error. Every call is safe to repeat, so every call is
retried on 429 (after ``Retry-After``), on 5xx and on timeouts, with backoff: ``create_post``
carries a ``pending_post_id``, which the server de-duplicates, so a retried post is not posted
twice; the others are reads, a get-or-create, or a patch to the same text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx
from bxcore.secrets import Secret
from pydantic import BaseModel, ValidationError

from .errors import MattermostProtocolError, MattermostRefused, MattermostUnavailable
from .models import Channel, MattermostUser, Post, PostList, describe_problems
from .stream import backoff_delay

log = logging.getLogger("gatewayd.rest")

M = TypeVar("M", bound=BaseModel)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
NO_PREVIEW = {"remove_link_preview": "true"}  # the web app shows no OpenGraph preview for it


def retry_delay(
    status: int | None, headers: Mapping[str, str], attempt: int, *, base: float,
    rng: random.Random | None = None,
) -> float:
    """How long to wait before retrying after a failed attempt (``status`` None: no answer).

    A 429 names its own wait: ``Retry-After`` seconds, else ``X-Ratelimit-Reset`` (seconds until
    the limit resets; Mattermost sends seconds, not the epoch its docs describe). Header names are
    matched case-insensitively, as httpx does.
    """
    if status == 429:
        for name in ("retry-after", "x-ratelimit-reset"):
            value = headers.get(name)
            if value is not None and value.strip().isdigit():
                return float(value.strip())
    return backoff_delay(attempt, minimum=base, maximum=60.0, rng=rng)


class MattermostClient:
    """One bot's view of one server. ``transport`` and ``sleep`` are for tests."""

    def __init__(
        self,
        server: str,
        token: Secret,
        *,
        retries: int = 5,
        timeout: float = 30.0,
        backoff: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self._http = httpx.AsyncClient(
            base_url=f"{server.rstrip('/')}/api/v4",
            headers={"Authorization": f"Bearer {token.reveal()}"},
            timeout=httpx.Timeout(timeout),
            transport=transport,
            follow_redirects=False,
        )
        self._retries = retries
        self._backoff = backoff
        self._sleep = sleep

    async def aclose(self) -> None:
        await self._http.aclose()

    async def me(self) -> MattermostUser:
        return await self._call("GET", "/users/me", MattermostUser)

    async def direct_channel(self, user_a: str, user_b: str) -> Channel:
        """The DM channel between two users, created if it does not exist yet."""
        return await self._call("POST", "/channels/direct", Channel, json=[user_a, user_b])

    async def create_post(
        self, channel_id: str, message: str, *, root_id: str = "", pending_post_id: str = "",
        inert: bool = False,
    ) -> Post:
        """``inert``: the post carries model text made inert; the web app is also told not to
        show a link preview for it (``remove_link_preview``, the prop its "remove preview" sets)."""
        body: dict[str, Any] = {
            "channel_id": channel_id,
            "message": message,
            "pending_post_id": pending_post_id or secrets.token_hex(13),
        }
        if root_id:
            body["root_id"] = root_id
        if inert:
            body["props"] = dict(NO_PREVIEW)
        return await self._call("POST", "/posts", Post, json=body)

    async def patch_post(self, post_id: str, message: str, *, inert: bool = False) -> Post:
        body: dict[str, Any] = {"message": message}
        if inert:
            body["props"] = dict(NO_PREVIEW)
        return await self._call("PUT", f"/posts/{post_id}/patch", Post, json=body)

    async def get_post(self, post_id: str) -> Post:
        return await self._call("GET", f"/posts/{post_id}", Post)

    async def thread(self, post_id: str) -> PostList:
        return await self._call("GET", f"/posts/{post_id}/thread", PostList)

    async def posts_since(self, channel_id: str, since_ms: int) -> PostList:
        """Every post in the channel created or changed since ``since_ms`` (at most 1000)."""
        return await self._call(
            "GET", f"/channels/{channel_id}/posts", PostList, params={"since": since_ms}
        )

    async def _call(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        what = f"{method} {path}"
        attempt = 0
        while True:
            attempt += 1
            try:
                async with _mapped_errors(what):
                    response = await self._http.request(method, path, **kwargs)
            except MattermostUnavailable as exc:
                status: int | None = None
                headers: Mapping[str, str] = {}
                failure = str(exc)
            else:
                if response.is_success:
                    return _parse(response, model, what)
                if response.status_code not in RETRY_STATUSES:
                    raise _refused(response, what)
                status, headers = response.status_code, response.headers
                failure = f"{what}: HTTP {status}"
            if attempt > self._retries:
                raise MattermostUnavailable(f"{failure} (gave up after {attempt} attempts)")
            delay = retry_delay(status, headers, attempt, base=self._backoff)
            log.warning("%s; retrying in %.1f s (attempt %d)", failure, delay, attempt)
            await self._sleep(delay)


@contextlib.asynccontextmanager
async def _mapped_errors(what: str) -> AsyncIterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:
        raise MattermostUnavailable(f"{what}: timed out ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise MattermostUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc


def _parse(response: httpx.Response, model: type[M], what: str) -> M:
    try:
        return model.model_validate(response.json())
    except ValidationError as exc:
        problems = describe_problems(exc)
        raise MattermostProtocolError(f"{what}: unexpected reply: {problems}") from None
    except ValueError:
        raise MattermostProtocolError(f"{what}: reply is not JSON") from None


def _refused(response: httpx.Response, what: str) -> MattermostRefused:
    error_id = message = ""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict):
            error_id = str(body.get("id", ""))
            message = str(body.get("message", ""))
    detail = f": {error_id} {message}".rstrip() if error_id else ""
    return MattermostRefused(
        f"{what}: HTTP {response.status_code}{detail}",
        status=response.status_code, error_id=error_id,
    )
