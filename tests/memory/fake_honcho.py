"""A fake Honcho v3 server, as an httpx transport, checked against the official spec.

Request bodies are validated with the spec's own JSON Schemas (a failure is FastAPI's 422), and
every response it makes is validated against the spec's response schema for that operation
(patched for the 201s the real server sends on create, reference §3.5). test_honcho_fake.py
replays the 33 recorded exchanges against it. Knobs: slow chat, chat 500, empty stream, 422 on
writes, outage (connection refused), and a lost response (written, then a timeout).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema

REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "honcho"
SPEC = json.loads((REFERENCE / "honcho-v3-openapi.json").read_text())
_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _operation(method: str, path: str) -> tuple[str, dict[str, Any]] | None:
    for template, ops in SPEC["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            return template, ops[method.lower()]
    return None


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "components": SPEC["components"]})


def validate_response(method: str, path: str, status: int, body: Any) -> None:
    """Raise if ``body`` is not what the spec gives for this operation and status."""
    found = _operation(method, path)
    assert found is not None, f"{method} {path} is not in the spec"
    if status == 422 and isinstance(body, dict) and isinstance(body.get("detail"), str):
        return  # the real server's checks after the schema's answer 422 {"detail": "<text>"}
    responses = found[1]["responses"]
    key = str(status) if str(status) in responses else ("200" if status == 201 else None)
    assert key is not None, f"{method} {path}: status {status} not in the spec"
    schema = responses[key].get("content", {}).get("application/json", {}).get("schema")
    if schema is not None:
        _validator(schema).validate(body)


def _request_errors(method: str, path: str, body: Any) -> list[dict[str, Any]]:
    found = _operation(method, path)
    if found is None:
        return []
    content = found[1].get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return []
    errors = []
    for error in _validator(content["schema"]).iter_errors(body):
        errors.append({"type": _pydantic_type(str(error.validator), error.instance),
                       "loc": ["body", *error.absolute_path], "msg": error.message,
                       "input": error.instance})
    return errors


def _pydantic_type(validator: str, instance: Any) -> str:
    """The error type FastAPI (pydantic) names for what a JSON Schema keyword refuses."""
    if validator in ("minLength", "maxLength", "minItems", "maxItems"):
        kind = "string_" if isinstance(instance, str) else ""
        return kind + ("too_short" if validator.startswith("min") else "too_long")
    return {"pattern": "string_pattern_mismatch", "required": "missing",
            "minimum": "greater_than_equal", "maximum": "less_than_equal"}.get(validator,
                                                                             validator)


# The query bounds of the listings memoryd pages through (the real server: page >= 1,
# 1 <= size <= 100; answered 422 like a body error, with loc ["query", name]).
_QUERY_BOUNDS = {"page": (1, None), "size": (1, 100)}


def _query_errors(params: dict[str, str]) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    for name, (low, high) in _QUERY_BOUNDS.items():
        if name not in params:
            continue
        value = int(params[name])
        if value < low:
            errors.append({"type": "greater_than_equal", "loc": ["query", name],
                           "msg": f"Input should be greater than or equal to {low}",
                           "input": params[name], "ctx": {"ge": low}})
        elif high is not None and value > high:
            errors.append({"type": "less_than_equal", "loc": ["query", name],
                           "msg": f"Input should be less than or equal to {high}",
                           "input": params[name], "ctx": {"le": high}})
    return errors


@dataclass
class Knobs:
    outage: bool = False  # every request: connection refused
    chat_delay: float = 0.0  # seconds before the chat answers anything
    chat_500: bool = False
    chat_empty_stream: bool = False
    reject_writes: bool = False  # add messages answers 422
    lose_next_write_response: bool = False  # store the messages, then time out


@dataclass
class FakeHoncho:
    answer: str = "owner prefers the helix editor."
    knobs: Knobs = field(default_factory=Knobs)
    workspaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    peers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    sessions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    check_responses: bool = True

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        self.requests.append((method, path))
        if self.knobs.outage:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else None
        errors = _query_errors(dict(request.url.params)) + _request_errors(method, path, body)
        if errors:
            return httpx.Response(422, json={"detail": errors})
        if path.endswith("/chat"):
            return await self._chat(path, body)
        status, payload = self._route(method, path, body, dict(request.url.params), request)
        if self.check_responses:
            validate_response(method, path, status, payload)
        return httpx.Response(status, json=payload)

    def _route(self, method: str, path: str, body: Any, params: dict[str, str],
               request: httpx.Request) -> tuple[int, Any]:
        parts = path.strip("/").split("/")[1:]  # drop "v3"
        if parts == ["workspaces"] and method == "POST":
            return self._get_or_create(self.workspaces, body["id"], {
                "id": body["id"], "metadata": body.get("metadata") or {},
                "configuration": body.get("configuration") or {}, "created_at": _now()})
        w = parts[1]
        if parts[2:] == ["peers"]:
            return self._get_or_create(self.peers, (w, body["id"]), self._peer(w, body["id"],
                                       body.get("metadata"), body.get("configuration")))
        if parts[2:] == ["sessions"]:
            for peer in body.get("peers") or {}:
                self.peers.setdefault((w, peer), self._peer(w, peer, None, None))
            return self._get_or_create(self.sessions, (w, body["id"]), {
                "id": body["id"], "is_active": True, "workspace_id": w,
                "metadata": body.get("metadata") or {}, "configuration": {},
                "created_at": _now()})
        if len(parts) == 5 and parts[2] == "sessions" and parts[4] == "messages":
            return self._add(w, parts[3], body["messages"], request)
        if len(parts) == 6 and parts[4:] == ["messages", "list"]:
            return 200, self._list(w, parts[3], body or {}, params)
        if parts[2:] == ["queue", "status"]:
            return 200, {"total_work_units": 0, "completed_work_units": 0,
                         "in_progress_work_units": 0, "pending_work_units": 0, "sessions": None}
        if parts[-1] == "search":
            query = body["query"].lower()
            scope = {"peers": "peer_id", "sessions": "session_id"}.get(parts[2])
            found = [m for m in self.messages if m["workspace_id"] == w
                     and (scope is None or m[scope] == parts[3])
                     and any(word in m["content"].lower() for word in query.split())]
            return 200, found[: body.get("limit", 10)]
        return 404, {"detail": "Not Found"}

    def _peer(self, w: str, peer: str, metadata: Any, configuration: Any) -> dict[str, Any]:
        return {"id": peer, "workspace_id": w, "created_at": _now(),
                "metadata": metadata or {}, "configuration": configuration or {}}

    @staticmethod
    def _get_or_create(table: dict[Any, Any], key: Any, value: dict[str, Any]) -> tuple[int, Any]:
        if key in table:
            return 200, table[key]
        table[key] = value
        return 201, value

    def _add(self, w: str, s: str, batch: list[dict[str, Any]],
             request: httpx.Request) -> tuple[int, Any]:
        if self.knobs.reject_writes:
            return 422, {"detail": [{"type": "value_error", "loc": ["body", "messages"],
                                     "msg": "rejected by the fake", "input": None}]}
        refused = [m["peer_id"] for m in batch if not _ID.match(m["peer_id"])]
        if refused:  # the real server's own check, after the schema's: a string detail
            return 422, {"detail": f"Peer name(s) {refused} must match pattern {_ID.pattern}"}
        created = []
        for m in batch:  # no de-duplication, like the real server
            self.peers.setdefault((w, m["peer_id"]), self._peer(w, m["peer_id"], None, None))
            created.append({  # the real server drops NUL characters (PostgreSQL text)
                "id": secrets.token_urlsafe(15)[:21], "content": m["content"].replace("\x00", ""),
                "peer_id": m["peer_id"], "session_id": s, "metadata": _without_nul(
                    m.get("metadata") or {}),
                "created_at": _normal_time(m["created_at"]) if m.get("created_at") else _now(),
                "workspace_id": w,
                "token_count": len(m["content"].split()),
            })
        self.messages.extend(created)
        if self.knobs.lose_next_write_response:
            self.knobs.lose_next_write_response = False
            raise httpx.ReadTimeout("the response was lost", request=request)
        return 201, created

    def _list(self, w: str, s: str, body: dict[str, Any], params: dict[str, str]) -> Any:
        wanted = ((body.get("filters") or {}).get("metadata")) or {}
        items = [m for m in self.messages if m["workspace_id"] == w and m["session_id"] == s
                 and all(m["metadata"].get(k) == v for k, v in wanted.items())]
        page, size = int(params.get("page", 1)), int(params.get("size", 50))
        pages = -(-len(items) // size)
        return {"items": items[(page - 1) * size : page * size], "total": len(items),
                "page": page, "size": size, "pages": pages}

    def seed(self, workspace: str, *peers: str) -> FakeHoncho:
        """A workspace that already holds these peers (the dialectic needs them)."""
        self.workspaces.setdefault(workspace, {"id": workspace, "metadata": {},
                                               "configuration": {}, "created_at": _now()})
        for peer in peers:
            self.peers.setdefault((workspace, peer), self._peer(workspace, peer, None, None))
        return self

    async def _chat(self, path: str, body: dict[str, Any]) -> httpx.Response:
        if self.knobs.chat_delay:
            await asyncio.sleep(self.knobs.chat_delay)
        w, peer = path.strip("/").split("/")[2], path.strip("/").split("/")[4]
        missing = [p for p in (body.get("target"), peer) if p and (w, p) not in self.peers]
        if self.knobs.chat_500 or missing:
            # The real server: 404 naming the peer (the target first), 500 when its model
            # fails; streaming, either is a 200 with no body at all.
            if body.get("stream"):
                return httpx.Response(200, headers={"content-type": "text/event-stream"})
            if missing:
                return httpx.Response(404, json={
                    "detail": f"Peer {missing[0]} not found in workspace {w}"})
            return httpx.Response(500, json={"detail": "An unexpected error occurred"})
        if not body.get("stream"):
            payload = {"content": self.answer}
            validate_response("POST", "/v3/workspaces/w/peers/p/chat", 200, payload)
            return httpx.Response(200, json=payload)
        if self.knobs.chat_empty_stream:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")
        half = len(self.answer) // 2
        events = [{"delta": {"content": self.answer[:half]}, "done": False},
                  {"delta": {"content": self.answer[half:]}, "done": False}, {"done": True}]
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        return httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"},
                              content=data)


def _now() -> str:
    return _normal_time(datetime.now(UTC).isoformat())


def _normal_time(value: str) -> str:
    """A time as the real server gives it back: UTC, 'Z', no fraction when it is zero."""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _without_nul(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v.replace("\x00", "") if isinstance(v, str) else v for k, v in metadata.items()}


def stalled_stream_transport() -> httpx.MockTransport:
    """A chat stream that sends one event and then nothing, forever (for the liveness timer)."""
    async def handler(request: httpx.Request) -> httpx.Response:
        async def body():
            yield b'data: {"delta": {"content": "par"}, "done": false}\n\n'
            await asyncio.Event().wait()
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())
    return httpx.MockTransport(handler)
