"""The fake Mattermost as a plain ASGI app: the REST calls gatewayd makes, and the WebSocket.

Every REST reply and request body is checked against the spec subset, every WebSocket frame
against the frame schema; what does not match is kept in ``violations``, which tests assert empty.
Knobs: ``fail`` (scripted 429/5xx or slow replies), ``post_reply_delay`` and ``post_save_delay``
(a POST /posts that is slow after or before saving), and the hub's (drops, seq gaps, duplicated
and held-back events, a server restart that forgets every connection, unanswered pings).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
from typing import Any

from .hub import CLOSE, Connection, Hub
from .spec import SpecChecker
from .state import MAX_RUNES, PENDING_TTL, Data, Fault, now_ms

AUTH_TIMEOUT = 5.0  # a socket with no session after this long is closed
RATE_LIMITED_HEADERS = {  # ../shared/reference/mattermost/http_429.txt
    "X-Ratelimit-Limit": "101", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1",
    "Retry-After": "1",
}


class Reply(Exception):
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None):
        self.status, self.body, self.headers = status, body, headers or {}


def app_error(status: int, error_id: str, message: str) -> Reply:
    return Reply(status, {"id": error_id, "message": message, "detailed_error": "",
                          "request_id": "", "status_code": status, "is_oauth": False})


class FakeMattermost:
    def __init__(self, spec: SpecChecker | None = None):
        self.spec = spec or SpecChecker()
        self.data = Data()
        self.violations: list[str] = []
        self.requests: list[tuple[str, str, int]] = []
        self.faults: list[Fault] = []
        self.post_reply_delay = 0.0
        self.post_save_delay = 0.0
        self.hub = Hub(lambda frame: self.violations.extend(self.spec.check_server_frame(frame)))
        self.client_frames: list[dict[str, Any]] = []
        self.edits: list[tuple[str, str]] = []  # (post id, new message) per patch
        self.connects: list[dict[str, str]] = []  # the query of every WebSocket upgrade

    # -- what tests call ------------------------------------------------------------------
    def add_user(self, username: str, *, bot: bool = False) -> tuple[str, str]:
        return self.data.add_user(username, bot=bot)

    def fail(self, method: str, path_prefix: str, *, status: int = 0, delay: float = 0.0,
             count: int = 1) -> None:
        self.faults.append(Fault(method, "/api/v4" + path_prefix, count, status, delay))

    def user_posts(self, user_id: str, channel_id: str, message: str, root_id: str = "") -> str:
        """A person posts through the web app: stored, broadcast, its id returned."""
        post = self.data.new_post(user_id, channel_id, message, root_id, f"{user_id}:{now_ms()}")
        self._broadcast_posted(post)
        return str(post["id"])

    def posts_by(self, user_id: str) -> list[dict[str, Any]]:
        return [p for p in self.data.posts.values() if p["user_id"] == user_id]

    def close_all(self) -> None:
        self.hub.drop()

    # -- ASGI -----------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        method, path = scope["method"], scope["path"]
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = dict(urllib.parse.parse_qsl(scope["query_string"].decode()))
        try:
            await self._apply_faults(method, path)
            user_id = self._authenticate(scope)
            body = json.loads(raw) if raw else None
            if body is not None:
                self.violations.extend(self.spec.check_request(method, path, body))
            reply = await self._route(method, path, query, body, user_id)
        except Reply as caught:
            reply = caught
        if isinstance(reply.body, str):
            payload, media = reply.body.encode(), "text/plain; charset=utf-8"
        else:
            payload, media = json.dumps(reply.body).encode(), "application/json"
        self.violations.extend(self.spec.check_response(method, path, reply.status, media, payload))
        self.requests.append((method, path, reply.status))
        headers = [(b"content-type", media.encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _apply_faults(self, method: str, path: str) -> None:
        for fault in self.faults:
            if fault.count > 0 and fault.method == method and path.startswith(fault.path_prefix):
                fault.count -= 1
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.status == 429:
                    raise Reply(429, "limit exceeded\n", dict(RATE_LIMITED_HEADERS))
                if fault.status:
                    raise app_error(fault.status, "fake.injected", "injected failure")
                return

    def _authenticate(self, scope: dict[str, Any]) -> str:
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        user_id = self.data.tokens.get(token) if scheme.lower() == "bearer" else None
        if user_id is None:
            raise app_error(401, "api.context.session_expired.app_error", "Invalid session")
        return user_id

    async def _route(
        self, method: str, path: str, query: dict[str, str], body: Any, me: str
    ) -> Reply:
        parts = path.removeprefix("/api/v4/").split("/")
        data = self.data
        if method == "GET" and parts[0] == "users" and len(parts) == 2:
            user = data.users.get(me if parts[1] == "me" else parts[1])
            if user is None:
                raise app_error(404, "app.user.missing_account.const", "Unable to find the user.")
            return Reply(200, user)
        if method == "POST" and parts == ["channels", "direct"]:
            pair = isinstance(body, list) and len(body) == 2
            if not (pair and all(u in data.users for u in body)):
                raise app_error(400, "api.context.invalid_body_param.app_error", "Invalid user ids")
            if me not in body:
                raise app_error(403, "api.context.permissions.app_error", "No permission")
            return Reply(201, data.direct(body[0], body[1]))
        if method == "POST" and parts == ["posts"]:
            return await self._create_post(body, me)
        if parts[0] == "posts" and len(parts) >= 2:
            post = data.posts.get(parts[1])
            if post is None:
                raise app_error(404, "app.post.get.app_error", "Unable to get the post.")
            self._require_member(post["channel_id"], me)
            if method == "GET" and len(parts) == 2:
                return Reply(200, post)
            if method == "GET" and parts[2:] == ["thread"]:
                root = post["root_id"] or post["id"]
                thread = [p for p in data.posts.values() if root in (p["id"], p["root_id"])]
                return Reply(200, data.post_list(thread))
            if method == "PUT" and parts[2:] == ["patch"]:
                return self._patch_post(post, body, me)
        if method == "GET" and parts[0] == "channels" and parts[2:] == ["posts"]:
            self._require_member(parts[1], me)
            since = int(query.get("since", "0"))
            posts = [p for p in data.posts.values()
                     if p["channel_id"] == parts[1] and p["update_at"] > since]
            return Reply(200, data.post_list(posts))
        raise app_error(404, "api.context.404.app_error", "Not found")

    def _require_member(self, channel_id: str, user_id: str) -> None:
        if user_id not in self.data.members.get(channel_id, set()):
            raise app_error(403, "api.context.permissions.app_error", "No permission")

    async def _create_post(self, body: Any, me: str) -> Reply:
        data = self.data
        if not isinstance(body, dict) or not isinstance(body.get("channel_id"), str) \
                or not isinstance(body.get("message"), str) \
                or not isinstance(body.get("props", {}), dict):
            raise app_error(400, "api.context.invalid_body_param.app_error", "Invalid post")
        channel_id, root_id = body["channel_id"], body.get("root_id", "")
        self._require_member(channel_id, me)
        if len(body["message"]) > MAX_RUNES:
            raise app_error(400, "model.post.is_valid.message_length.app_error", "Too long")
        if root_id:
            root = data.posts.get(root_id)
            if root is None or root["root_id"]:
                raise app_error(400, "api.post.create_post.root_id.app_error", "Invalid RootId")
            if root["channel_id"] != channel_id:
                raise app_error(400, "api.post.create_post.channel_root_id.app_error",
                                "Invalid ChannelId for RootId")
        pending = body.get("pending_post_id", "")
        seen = data.pending.get(pending) if pending else None
        if seen is not None and time.monotonic() - seen[1] < PENDING_TTL:
            if seen[0] is None:
                raise app_error(500, "api.post.deduplicate_create_post.pending",
                                "Post creation is already in progress")
            return Reply(201, data.posts[seen[0]])
        if pending:
            data.pending[pending] = (None, time.monotonic())
        if self.post_save_delay:
            await asyncio.sleep(self.post_save_delay)
        post = data.new_post(me, channel_id, body["message"], root_id, pending,
                             props=body.get("props", {}))
        if pending:
            data.pending[pending] = (post["id"], time.monotonic())
        self._broadcast_posted(post)
        if self.post_reply_delay:
            await asyncio.sleep(self.post_reply_delay)
        return Reply(201, post)

    def _patch_post(self, post: dict[str, Any], body: Any, me: str) -> Reply:
        if post["user_id"] != me:
            raise app_error(403, "api.context.permissions.app_error", "No permission")
        if not isinstance(body, dict) or ("props" in body and not isinstance(body["props"], dict)):
            raise app_error(400, "api.context.invalid_body_param.app_error", "Invalid patch")
        if isinstance(body.get("message"), str):
            if len(body["message"]) > MAX_RUNES:
                raise app_error(400, "model.post.is_valid.message_length.app_error", "Too long")
            post["message"] = body["message"]
            self.edits.append((post["id"], body["message"]))
        if "props" in body:  # PostPatch.Props replaces the post's props
            post["props"] = body["props"]
        post["edit_at"] = post["update_at"] = max(now_ms(), post["update_at"] + 1)
        self.hub.emit("post_edited", {"post": json.dumps(post)}, post["channel_id"],
                      self.data.members[post["channel_id"]])
        return Reply(200, post)

    def _broadcast_posted(self, post: dict[str, Any]) -> None:
        self.hub.emit("posted", self.data.posted_data(post), post["channel_id"],
                      self.data.members[post["channel_id"]])

    # -- WebSocket ------------------------------------------------------------------------
    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        query = dict(urllib.parse.parse_qsl(scope["query_string"].decode()))
        self.connects.append(query)
        await send({"type": "websocket.accept"})
        try:
            user_id: str | None = self._authenticate(scope)
        except Reply:
            user_id = None
        challenge_seq = 0
        if user_id is None:  # option B: authentication_challenge within AUTH_TIMEOUT
            try:
                message = await asyncio.wait_for(receive(), AUTH_TIMEOUT)
                request = json.loads(message.get("text") or "{}")
            except (TimeoutError, ValueError):
                request = {}
            user_id = self.data.tokens.get(str((request.get("data") or {}).get("token")))
            if request.get("action") != "authentication_challenge" or user_id is None:
                await send({"type": "websocket.close", "code": 1008})  # no FAIL reply
                return
            challenge_seq = request.get("seq", 1)
        sequence = query.get("sequence_number")
        connection, first = self.hub.attach(
            user_id, query.get("connection_id", "") if challenge_seq == 0 else "",
            int(sequence) if sequence and sequence.isdigit() else None,
        )
        assert connection.outbox is not None
        for text in first:
            connection.outbox.put_nowait(text)
        if challenge_seq:  # hello is queued before the OK reply, as the server does
            connection.outbox.put_nowait(json.dumps({"status": "OK", "seq_reply": challenge_seq}))
        sender = asyncio.create_task(self._send_loop(connection, send))
        try:
            await self._receive_loop(connection, receive)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            self.hub.detach(connection)

    async def _send_loop(self, connection: Connection, send: Any) -> None:
        assert connection.outbox is not None
        while True:
            item = await connection.outbox.get()
            if item is CLOSE:
                self.hub.detach(connection)
                await send({"type": "websocket.close", "code": 1001})
                return
            await send({"type": "websocket.send", "text": item})

    async def _receive_loop(self, connection: Connection, receive: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            try:
                request = json.loads(message.get("text") or "")
            except ValueError:
                continue
            self.client_frames.append(request)
            self.violations.extend(self.spec.check_client_frame(request))
            if request.get("action") == "ping" and not self.hub.knobs.answer_pings:
                continue
            reply = self.hub.reply(request)
            self.violations.extend(self.spec.check_server_frame(reply))
            if connection.outbox is not None:
                connection.outbox.put_nowait(json.dumps(reply))
