"""What gatewayd reads from Mattermost: posts, users, channels, post lists.

These are the peer's data, not ours: the server adds fields release by release (the spec subset
says so), so unknown fields are ignored here, unlike Boxmaker's own wire models which refuse them.
Only the fields gatewayd uses are declared; a missing required one is a protocol error.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

MAX_POST_RUNES = 16383  # model.PostMessageMaxRunesV2: the server refuses longer messages


class PeerModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Post(PeerModel):
    id: StrictStr = Field(min_length=1)
    channel_id: StrictStr = Field(min_length=1)
    user_id: StrictStr = Field(min_length=1)
    message: StrictStr
    create_at: StrictInt
    update_at: StrictInt = 0
    edit_at: StrictInt = 0
    delete_at: StrictInt = 0
    root_id: StrictStr = ""
    type: StrictStr = ""  # "" for a user post; "system_*" for server notices
    pending_post_id: StrictStr = ""
    props: dict[str, Any] | None = None

    @property
    def thread_root(self) -> str:
        """The id of the thread this post belongs to: its root, or itself when it is a root."""
        return self.root_id or self.id


class MattermostUser(PeerModel):
    id: StrictStr = Field(min_length=1)
    username: StrictStr = ""
    is_bot: StrictBool = False


class Channel(PeerModel):
    id: StrictStr = Field(min_length=1)
    type: StrictStr  # O public, P private, D direct, G group
    name: StrictStr = ""
    team_id: StrictStr = ""


class PostList(PeerModel):
    order: list[StrictStr] = Field(default_factory=list)
    posts: dict[str, Post] = Field(default_factory=dict)

    def in_order(self) -> list[Post]:
        """The posts, oldest first (the server lists ``order`` newest first)."""
        return sorted(self.posts.values(), key=lambda post: (post.create_at, post.id))


def describe_problems(exc: ValidationError) -> str:
    """Where and what is wrong, never the input: it may be the text of a private message."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or '(top)'}: {error['msg']}"
        for error in exc.errors()
    )
