"""The fake's data: users, channels, posts, and the failure knobs the tests turn."""

from __future__ import annotations

import json
import random
import string
import time
from dataclasses import dataclass, field
from typing import Any

MAX_RUNES = 16383
PENDING_TTL = 30.0  # seconds a pending_post_id is remembered (pendingPostIDsCacheTTL)


def new_id() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=26))


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Fault:
    """One scripted REST failure: ``status`` (with a body), or ``delay`` seconds before replying."""

    method: str
    path_prefix: str
    count: int
    status: int = 0
    delay: float = 0.0


@dataclass
class Data:
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)
    posts: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: dict[str, tuple[str | None, float]] = field(default_factory=dict)

    def add_user(self, username: str, *, bot: bool = False) -> tuple[str, str]:
        user_id, token = new_id(), new_id()
        stamp = now_ms()
        self.users[user_id] = {
            "id": user_id, "create_at": stamp, "update_at": stamp, "delete_at": 0,
            "username": username, "first_name": "", "last_name": "", "nickname": "",
            "email": f"{username}@example.org", "email_verified": True, "auth_service": "",
            "roles": "system_user", "locale": "en", "notify_props": {}, "props": {},
            "last_password_update": stamp, "last_picture_update": 0, "failed_attempts": 0,
            "mfa_active": False, "is_bot": bot,
            "timezone": {"useAutomaticTimezone": "true", "manualTimezone": "",
                         "automaticTimezone": ""},
        }
        self.tokens[token] = user_id
        return user_id, token

    def add_channel(self, kind: str, name: str, members: set[str]) -> dict[str, Any]:
        stamp = now_ms()
        channel = {
            "id": new_id(), "create_at": stamp, "update_at": stamp, "delete_at": 0,
            "team_id": "" if kind in "DG" else new_id(), "type": kind, "display_name": name,
            "name": name, "header": "", "purpose": "", "last_post_at": 0, "total_msg_count": 0,
            "extra_update_at": 0, "creator_id": "",
        }
        self.channels[channel["id"]] = channel
        self.members[channel["id"]] = set(members)
        return channel

    def direct(self, user_a: str, user_b: str) -> dict[str, Any]:
        name = "__".join(sorted((user_a, user_b)))
        for channel in self.channels.values():
            if channel["type"] == "D" and channel["name"] == name:
                return channel
        return self.add_channel("D", name, {user_a, user_b})

    def new_post(
        self, user_id: str, channel_id: str, message: str, root_id: str, pending_post_id: str,
        props: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        stamp = max([now_ms()] + [p["create_at"] + 1 for p in self.posts.values()])
        post = {
            "id": new_id(), "create_at": stamp, "update_at": stamp, "edit_at": 0,
            "delete_at": 0, "is_pinned": False, "user_id": user_id, "channel_id": channel_id,
            "root_id": root_id, "original_id": "", "message": message, "type": "",
            "props": dict(props or {}), "hashtags": "", "file_ids": [],
            "pending_post_id": pending_post_id,
            "remote_id": "", "reply_count": 0, "last_reply_at": 0, "participants": None,
            "metadata": {},
        }
        self.posts[post["id"]] = post
        self.channels[channel_id]["last_post_at"] = stamp
        return post

    def post_list(self, posts: list[dict[str, Any]]) -> dict[str, Any]:
        ordered = sorted(posts, key=lambda p: p["create_at"], reverse=True)
        return {
            "order": [p["id"] for p in ordered], "posts": {p["id"]: p for p in ordered},
            "next_post_id": "", "prev_post_id": "", "has_next": False,
        }

    def posted_data(self, post: dict[str, Any]) -> dict[str, Any]:
        channel = self.channels[post["channel_id"]]
        return {
            "channel_display_name": channel["display_name"], "channel_name": channel["name"],
            "channel_type": channel["type"], "post": json.dumps(post),
            "sender_name": "@" + self.users[post["user_id"]]["username"],
            "set_online": True, "team_id": channel["team_id"],
        }
