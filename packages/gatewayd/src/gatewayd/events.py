"""Mattermost WebSocket messages as typed events: a pure function, no I/O.

    parse_message(text) -> Hello | Posted | PostEdited | PostDeleted | OtherEvent | Reply
                           | Malformed

It never raises. A message that cannot be read becomes ``Malformed`` with the reason (never the
message text, which may be a private DM) and, when it could be read, the event's ``seq``, so the
sequence tracker can step over it instead of seeing a gap.

Shapes follow ``../shared/reference/mattermost/``: ``posted``, ``post_edited`` and
``post_deleted`` carry the post as a JSON *string* in ``data.post``, decoded a second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeGuard

from pydantic import ValidationError

from .models import Post, describe_problems


@dataclass(frozen=True, kw_only=True)
class Hello:
    seq: int
    connection_id: str  # "" from servers too old to send one: every reconnect is then fresh
    server_version: str


@dataclass(frozen=True, kw_only=True)
class Posted:
    seq: int
    post: Post
    channel_type: str  # O, P, D or G


@dataclass(frozen=True, kw_only=True)
class PostEdited:
    seq: int
    post: Post


@dataclass(frozen=True, kw_only=True)
class PostDeleted:
    seq: int
    post: Post


@dataclass(frozen=True, kw_only=True)
class OtherEvent:
    """An event gatewayd does not act on (typing, status_change, ...); it still uses up a seq."""

    seq: int
    name: str


@dataclass(frozen=True, kw_only=True)
class Reply:
    """The answer to one of our requests (``ping``); replies do not use up an event seq."""

    seq_reply: int
    ok: bool
    data: dict[str, Any]
    error_id: str


@dataclass(frozen=True, kw_only=True)
class Malformed:
    seq: int | None  # the event's seq when it could be read
    reason: str


Event = Hello | Posted | PostEdited | PostDeleted | OtherEvent
WsMessage = Event | Reply | Malformed

_CHANNEL_TYPES = frozenset({"O", "P", "D", "G"})


class _Bad(Exception):
    pass


def parse_message(text: str | bytes) -> WsMessage:
    """One WebSocket text message in, one typed value out."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return Malformed(seq=None, reason="not JSON")
    if not isinstance(value, dict):
        return Malformed(seq=None, reason=f"a JSON {type(value).__name__}, not an object")
    if "seq_reply" in value:
        return _reply(value)
    seq = value.get("seq")
    if not _is_int(seq) or seq < 0:
        return Malformed(seq=None, reason="event without a valid 'seq'")
    try:
        return _event(value, seq)
    except _Bad as exc:
        return Malformed(seq=seq, reason=f"event {str(value.get('event'))[:40]!r}: {exc}")


def _event(value: dict[str, Any], seq: int) -> Event:
    name = value.get("event")
    data = value.get("data")
    if not isinstance(name, str) or not name:
        raise _Bad("no 'event' name")
    if not isinstance(data, dict):
        raise _Bad("'data' is not an object")
    if name == "hello":
        version = _string(data, "server_version")
        connection_id = data.get("connection_id", "")
        if not isinstance(connection_id, str):
            raise _Bad("data.connection_id is not a string")
        return Hello(seq=seq, connection_id=connection_id, server_version=version)
    if name == "posted":
        channel_type = _string(data, "channel_type")
        if channel_type not in _CHANNEL_TYPES:
            raise _Bad(f"unknown channel_type {channel_type[:8]!r}")
        return Posted(seq=seq, post=_post(data), channel_type=channel_type)
    if name == "post_edited":
        return PostEdited(seq=seq, post=_post(data))
    if name == "post_deleted":
        return PostDeleted(seq=seq, post=_post(data))
    return OtherEvent(seq=seq, name=name)


def _post(data: dict[str, Any]) -> Post:
    raw = _string(data, "post")
    try:
        decoded = json.loads(raw)
    except (ValueError, RecursionError):
        raise _Bad("data.post is not JSON") from None
    if not isinstance(decoded, dict):
        raise _Bad("data.post is not a JSON object")
    try:
        return Post.model_validate(decoded)
    except ValidationError as exc:
        raise _Bad(f"data.post: {describe_problems(exc)}") from None


def _string(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _Bad(f"data.{key} is missing or not a string")
    return value


def _reply(value: dict[str, Any]) -> WsMessage:
    seq_reply = value.get("seq_reply")
    status = value.get("status")
    if not _is_int(seq_reply) or status not in ("OK", "FAIL"):
        return Malformed(seq=None, reason="reply without a valid 'seq_reply' and 'status'")
    data = value.get("data")
    error = value.get("error")
    error_id = error.get("id", "") if isinstance(error, dict) else ""
    return Reply(
        seq_reply=seq_reply,
        ok=status == "OK",
        data=data if isinstance(data, dict) else {},
        error_id=error_id if isinstance(error_id, str) else "",
    )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
