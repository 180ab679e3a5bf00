"""A scripted proxy in front of the real llama-server whose completions carry the usage the real
server would report: the prompt counted by the server's template and tokenizer, what was
"generated" by its tokenizer. A completion the slot could not have held is not one a model can
emit: it is answered with an error and flagged, so the test rejects the example.

``calls``: the next chat request is answered with these tool calls. ``summary``: the next
compaction request (its newest message is loopd's compaction instruction) is answered with this
text, cut to the request's ``max_tokens`` as the server cuts a model that rambles on. Every other
request goes to the real server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from inference.fake_server import FakeServer, _Body, completion
from loopd.epochs import COMPACT_INSTRUCTION
from loopd.inference.request import CHAT_PATH


class RealisticProxy(httpx.AsyncBaseTransport):
    def __init__(self, socket: Path, *, model: str, context: int):
        self._upstream = httpx.AsyncHTTPTransport(uds=str(socket))
        self._server = httpx.AsyncClient(transport=self._upstream, base_url="http://llama")
        self._model = model
        self._context = context
        self.calls: list[tuple[str, str]] | None = None
        self.summary: str | None = None
        self.summary_given: int | None = None  # the tokens of the summary it last gave
        self.impossible = False  # the completion would not have fitted the slot

    async def tokens(self, text: str) -> list[int]:
        answer = await self._server.post("/tokenize", json={"model": self._model,
                                                            "content": text})
        return list(answer.json()["tokens"])

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != CHAT_PATH:
            return await self._upstream.handle_async_request(request)
        body = json.loads(await request.aread())
        if self.summary is not None and _compacting(body):
            summary, self.summary = self.summary, None
            return await self._summary(body, summary)
        if self.calls is None:
            return await self._upstream.handle_async_request(request)
        calls, self.calls = self.calls, None
        prompt = await self._prompt(body)
        predicted = len(await self.tokens("".join(f"{n}{a}" for n, a in calls))) + 10 * len(calls)
        self.impossible = prompt + predicted > self._context
        if self.impossible:  # no model could emit it: the example is rejected, unanswered
            return httpx.Response(500, json={"error": {"code": 500, "type": "server_error",
                                                       "message": "over the slot (test)"}})
        steps = completion(tool_calls=tuple((f"c{i}", n, a) for i, (n, a) in enumerate(calls)),
                           cache_n=0, prompt_n=prompt)
        return _streamed(steps, predicted)

    async def _summary(self, body: dict[str, Any], summary: str) -> httpx.Response:
        """The summary as the server would stream it: at most ``max_tokens`` of it."""
        prompt = await self._prompt(body)
        if prompt >= self._context:
            return httpx.Response(400, json={"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt,
                "n_ctx": self._context, "message": "the request exceeds the context (test)"}})
        tokens = (await self.tokens(summary))[: body.get("max_tokens") or len(summary)]
        answer = await self._server.post("/detokenize", json={"model": self._model,
                                                              "tokens": tokens})
        text = answer.json()["content"]
        self.summary_given = len(tokens)
        return _streamed(completion(content=text, cache_n=0, prompt_n=prompt), len(tokens))

    async def _prompt(self, body: dict[str, Any]) -> int:
        rendered = await self._server.post("/apply-template", json={
            "model": self._model, "messages": body["messages"], "tools": body.get("tools")})
        return len(await self.tokens(rendered.json()["prompt"]))

    async def aclose(self) -> None:
        await self._server.aclose()


def _compacting(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and messages[-1].get("content") == COMPACT_INSTRUCTION


def _streamed(steps: list[Any], predicted: int) -> httpx.Response:
    steps = [re.sub(rb'"predicted_n":\d+', b'"predicted_n":%d' % predicted, s)
             if isinstance(s, bytes) else s for s in steps]
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          stream=_Body(steps, FakeServer([])))
