"""The inference client: httpx over inferproxy's Unix socket, a thin shell around the pure parts.

    client = InferenceClient(config.inference, socket=path)        # or transport=... in tests
    completion = await client.chat(request, events)                # with retries
    await client.aclose()

Liveness, not deadlines: the wait for the response (queued behind another client on the slot, or
the router loading the model) has its own long limit, ``first_byte_timeout``; after that, the
stream fails only when no byte arrives for ``liveness_timeout`` (keep-alive comments and progress
chunks count). There is no limit on the whole request.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpcore
import httpx
from bxcore.config import InferenceSection
from bxcore.errors import BadEventStream
from bxcore.protocol.loop import ThinkingCapped, Waiting
from bxcore.sse import END, NEED_DATA, Message, SSEParser

from .api import ChatRequest, Completion, EventSink
from .assembler import CompletionAssembler
from .chunks import parse_chunk, parse_error_body
from .errors import (
    UNREADABLE_OUTPUT,
    BadStream,
    InferenceError,
    ServerRejected,
    SessionFull,
    Stalled,
    StreamCut,
    Unavailable,
    UnreadableOutput,
)
from .gate import SlotGate
from .request import CHAT_PATH, CONTROL_PATH, reasoning_end_body, request_body
from .retry import chat_with_retry

T = TypeVar("T")
BASE_URL = "http://inferproxy"  # the host is never resolved: every byte goes to the socket
CONTEXT_FULL = "exceed_context_size_error"
# llama-server closes a connection idle for 5 s (it answers "Keep-Alive: timeout=5"), and httpx's
# pool also keeps one for 5 s: with equal limits the pool reuses a connection just as the server
# closes it, and the close reaches us late through inferproxy on a busy machine. Giving up idle
# connections much sooner leaves the close seconds to arrive (tests/proxy/test_keepalive.py).
KEEPALIVE_EXPIRY = 2.0
# What a request sent into a connection the server had already closed ends in: EOF instead of a
# response ("Server disconnected without sending a response"), or a reset. A GET is idempotent,
# and so are the POSTs that only compute (tokenize, apply the template): such a request is sent
# once more, on a new connection (the pool drops the dead one).
STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
IDEMPOTENT_POSTS = frozenset({"/tokenize", "/detokenize", "/apply-template"})


def closed_before_answering(exc: Exception) -> bool:
    """The connection was closed or reset before a single byte of answer: what a pooled
    connection the server had already closed gives, as opposed to an answer that came and was
    not HTTP. httpx's error is caused by httpcore's. httpcore raises a RemoteProtocolError of
    its own, while handling nothing, in one case: the stream ended while the server had not
    begun its response (h11's SEND_RESPONSE state). Every other one is h11's parser error
    translated, raised while handling it (its ``__context__``; the pool drops the ``__cause__``
    when it re-raises)."""
    if isinstance(exc, httpx.RemoteProtocolError):
        origin = exc.__cause__
        return isinstance(origin, httpcore.RemoteProtocolError) and origin.__context__ is None
    return isinstance(exc, (httpx.ReadError, httpx.WriteError))


def unix_transport(socket: str | Path) -> httpx.AsyncHTTPTransport:
    """HTTP over inferproxy's socket, with the pool's keep-alive below the server's."""
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)
    return httpx.AsyncHTTPTransport(uds=str(socket), limits=limits)


@contextlib.contextmanager
def _map_http_errors(what: str, error: type[InferenceError]) -> Iterator[None]:
    """httpx's exceptions become ours at this one edge; nothing above catches httpx errors."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise Unavailable(f"{what}: timed out ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise error(f"{what}: {type(exc).__name__}: {exc}") from exc


@contextlib.contextmanager
def _bad_stream() -> Iterator[None]:
    """The SSE parser's error is the server's doing: BadStream, not retried."""
    try:
        yield
    except BadEventStream as exc:
        raise BadStream(str(exc)) from exc


class InferenceClient:
    """Implements ``Inference``. Share one per process: its slot gate is per process."""

    def __init__(
        self,
        section: InferenceSection,
        *,
        socket: str | Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        gate: SlotGate | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ):
        if transport is None:
            if socket is None:
                raise ValueError("InferenceClient needs a socket path or a transport")
            transport = unix_transport(socket)
        self.section = section
        self.gate = gate or SlotGate()
        self._sleep = sleep
        self._jitter = jitter
        timeout = httpx.Timeout(None, connect=section.connect_timeout)
        self._http = httpx.AsyncClient(transport=transport, base_url=BASE_URL, timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> InferenceClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def chat(self, request: ChatRequest, events: EventSink) -> Completion:
        return await chat_with_retry(
            self.chat_once,
            request,
            events,
            retries=self.section.retries,
            backoff=self.section.retry_backoff,
            sleep=self._sleep,
            jitter=self._jitter,
        )

    async def chat_once(self, request: ChatRequest, events: EventSink) -> Completion:
        """One attempt, holding the slot gate for its whole length."""
        async with self.gate.hold(request.slot, events):
            body = request_body(request, self.section)
            with _map_http_errors("inferproxy", Unavailable):
                response = await self._first_byte(
                    self._send_chat(body), request.slot, events
                )
            try:
                if response.status_code != 200:
                    await self._raise_for_status(response)
                return await self._read_stream(response, request, events)
            finally:
                await response.aclose()

    async def _send_chat(self, body: dict[str, Any]) -> httpx.Response:
        """The completion request's response head. A request that met a connection the server
        had already closed got no answer at all; a completion changes nothing on the server but
        its prompt cache, so it is sent once more on a new connection, as the idempotent requests
        are, and ``retries`` stays for what the server itself answers."""
        try:
            return await self._http.send(
                self._http.build_request("POST", CHAT_PATH, json=body), stream=True)
        except STALE_CONNECTION as exc:
            if not closed_before_answering(exc):
                raise  # an answer that is not HTTP is the server's doing: `retries` counts it
            return await self._http.send(
                self._http.build_request("POST", CHAT_PATH, json=body), stream=True)

    async def _first_byte(
        self, pending: Awaitable[httpx.Response], slot: int, events: EventSink
    ) -> httpx.Response:
        """The response head, within ``first_byte_timeout``. llama-server sends its headers with
        the first chunk, so until then the request is queued or the model is loading; after
        ``waiting_notice`` the channel is told which (``waiting {slot_busy}``)."""
        task = asyncio.ensure_future(pending)
        limit, notice = self.section.first_byte_timeout, self.section.waiting_notice
        try:
            done, _ = await asyncio.wait({task}, timeout=min(notice, limit))
            if not done:
                await events(Waiting(slot_busy=await self._slot_busy(slot)))
                done, _ = await asyncio.wait({task}, timeout=max(limit - notice, 0))
            if not done:
                raise Stalled(f"the server sent nothing for {limit:g} s (first_byte_timeout)")
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _slot_busy(self, slot: int) -> bool:
        """Whether the server reports the slot busy (another client); False if it cannot say,
        as while the router loads the model."""
        try:
            slots = await self._json(
                "GET",
                "/slots",
                self.section.connect_timeout,
                params={"model": self.section.model, "autoload": "false"},
            )
        except InferenceError:
            return False
        if not isinstance(slots, list):
            return False
        return any(s.get("id") == slot and s.get("is_processing") is True for s in slots)

    async def _raise_for_status(self, response: httpx.Response) -> None:
        with _map_http_errors("inferproxy", StreamCut):
            raw = await response.aread()
        error = parse_error_body(raw)
        message = error.message if error else raw[:300].decode("utf-8", "replace")
        status = response.status_code
        if status == 400 and error is not None and error.type == CONTEXT_FULL:
            raise SessionFull(f"the prompt does not fit the slot: {message}",
                              prompt_tokens=error.n_prompt_tokens)
        if status == 503:
            raise Unavailable(f"the server is not ready (HTTP 503): {message}")
        if UNREADABLE_OUTPUT in message:
            raise UnreadableOutput(f"the server could not read the model's output (HTTP "
                                   f"{status}): {message}")
        raise ServerRejected(
            f"the server refused the request (HTTP {status}): {message}", status=status
        )

    async def _read_stream(
        self, response: httpx.Response, request: ChatRequest, events: EventSink
    ) -> Completion:
        """The streamed completion. The thinking cap is the turn's: reasoning is ended once the
        tokens of this completion and the turn's earlier ones (``request.reasoning_spent``)
        reach ``thinking_cap``, at the first reasoning token if the turn has none left."""
        parser = SSEParser()
        assembler = CompletionAssembler()
        capped = cap_sent = False
        spent_before, cap = request.reasoning_spent, self.section.thinking_cap
        chunks = response.aiter_raw()
        liveness = self.section.liveness_timeout
        while True:
            with _map_http_errors("the stream", StreamCut):
                try:
                    data = await asyncio.wait_for(anext(chunks), liveness)
                except StopAsyncIteration:
                    data = b""
                except TimeoutError:
                    raise Stalled(f"no bytes for {liveness:g} s (liveness_timeout)") from None
            with _bad_stream():  # only the parser raises BadEventStream here
                parser.feed(data)
                while (event := parser.next_event()) is not NEED_DATA and event is not END:
                    if not isinstance(event, Message):
                        continue  # a keep-alive comment: its bytes already counted for liveness
                    for channel_event in assembler.add(parse_chunk(event.data)):
                        await events(channel_event)
                    spent = spent_before + assembler.reasoning_tokens
                    if not cap_sent and assembler.reasoning_tokens and spent >= cap:
                        cap_sent = True
                        capped = await self._end_reasoning(assembler.completion_id)
                        if capped:
                            await events(ThinkingCapped(tokens=spent))
            if event is END or not data:
                return assembler.finish(thinking_capped=capped)

    async def _end_reasoning(self, completion_id: str | None) -> bool:
        """Ask the server to close the running reasoning block; True if it did."""
        if completion_id is None:
            return False
        body = reasoning_end_body(completion_id, self.section)
        try:
            answer = await self._json(
                "POST", CONTROL_PATH, self.section.liveness_timeout, json=body
            )
        except InferenceError:
            return False  # the cap failed; the completion itself is still good
        return isinstance(answer, dict) and answer.get("success") is True

    async def get_json(self, path: str, **params: str) -> Any:
        """GET a JSON endpoint (``/props``, ``/slots``) of the configured model."""
        params.setdefault("model", self.section.model)
        return await self._json("GET", path, self.section.first_byte_timeout, params=params)

    async def tokenize(self, text: str) -> list[int]:
        """The configured model's tokens of ``text`` (the server's ``/tokenize``)."""
        answer = await self.post_json("/tokenize", {"model": self.section.model, "content": text})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ServerRejected(f"POST /tokenize: no token list in {str(answer)[:200]}",
                                 status=200)
        return tokens

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return await self._json("POST", path, self.section.first_byte_timeout, json=body)

    async def _json(self, method: str, path: str, timeout: float, **kwargs: Any) -> Any:
        with _map_http_errors(f"{method} {path}", Unavailable):
            try:
                response = await self._request(method, path, timeout, **kwargs)
            except TimeoutError:
                raise Unavailable(f"{method} {path}: no answer within {timeout:g} s") from None
        if response.status_code != 200:
            error = parse_error_body(response.content)
            message = error.message if error else response.text[:300]
            raise ServerRejected(
                f"{method} {path}: HTTP {response.status_code}: {message}",
                status=response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise ServerRejected(
                f"{method} {path}: the answer is not JSON: {exc}", status=response.status_code
            ) from None

    async def _request(
        self, method: str, path: str, timeout: float, **kwargs: Any
    ) -> httpx.Response:
        """One request, each attempt within ``timeout``; an idempotent one that met a connection
        the server had closed is sent once more."""
        try:
            return await asyncio.wait_for(self._http.request(method, path, **kwargs), timeout)
        except STALE_CONNECTION:
            if method != "GET" and path not in IDEMPOTENT_POSTS:
                raise
        return await asyncio.wait_for(self._http.request(method, path, **kwargs), timeout)
