"""Who gets served: a pure decision per post. Identity is the Mattermost user id.

Direct messages from allowlisted users are served; a channel that is not a DM only if its id is
allowlisted too. Everyone else gets nothing (the refusal is logged by the caller, without the
text). The bot's own posts and system posts are ignored. ``!approve <id>`` and ``!deny <id>``
are approval commands, never turns. A thread is a session: the root post's id names it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bxcore.config.gateway import MATTERMOST_ID
from bxcore.ids import check_session_id

from .errors import SetupError
from .models import Post

SESSION_PREFIX = "mm-"
_COMMAND = re.compile(r"\s*!(approve|deny)\s+(\S+)\s*")


@dataclass(frozen=True, kw_only=True)
class TurnPost:
    post: Post
    session: str
    resume: bool  # a reply in a thread continues its session; a new root post starts one


@dataclass(frozen=True, kw_only=True)
class Command:
    post: Post
    verdict: Literal["approve", "deny"]
    approval_id: str


@dataclass(frozen=True, kw_only=True)
class Ignore:
    reason: str


@dataclass(frozen=True, kw_only=True)
class Refuse:
    reason: str  # logged with the user and channel ids, never the message


Route = TurnPost | Command | Ignore | Refuse


def session_for(root_post_id: str) -> str:
    """The session of a thread: ``mm-<root post id>``, a valid bxcore SessionId."""
    return str(check_session_id(SESSION_PREFIX + root_post_id))


def root_of_session(session: str) -> str | None:
    """The thread root of a session gatewayd started, or None for another channel's session."""
    root = session.removeprefix(SESSION_PREFIX)
    if session.startswith(SESSION_PREFIX) and MATTERMOST_ID.fullmatch(root):
        return root
    return None


def route(
    post: Post, channel_type: str, *, me: str, allowlist: Collection[str],
    channels: Collection[str],
) -> Route:
    if post.user_id == me:
        return Ignore(reason="the bot's own post")
    if post.type:
        return Ignore(reason=f"a system post ({post.type})")
    if post.delete_at:
        return Ignore(reason="a deleted post")
    allowed_user = post.user_id in allowlist
    if channel_type != "D" and post.channel_id not in channels:
        return Refuse(reason="channel is not allowlisted")
    command = _COMMAND.fullmatch(post.message)
    if command and (allowed_user or channel_type != "D"):
        # In a shared allowlisted channel a stranger's command is refused with a reply, so the
        # approvals layer sees it; a stranger's DM gets nothing at all.
        verdict: Literal["approve", "deny"] = "approve" if command[1] == "approve" else "deny"
        return Command(post=post, verdict=verdict, approval_id=command[2])
    if not allowed_user:
        return Refuse(reason="user is not allowlisted")
    return TurnPost(post=post, session=session_for(post.thread_root), resume=bool(post.root_id))


def load_allowlist(path: Path) -> frozenset[str]:
    """A file of Mattermost user ids, one per line; ``#`` starts a comment."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SetupError(f"{path}: cannot read the allowlist: {exc}") from None
    users = set()
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        if not MATTERMOST_ID.fullmatch(entry):
            raise SetupError(f"{path}:{number}: not a Mattermost user id (26 of a-z, 0-9)")
        users.add(entry)
    return frozenset(users)
