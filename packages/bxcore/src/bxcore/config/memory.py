"""[memory]: memoryd's files, index and Honcho.

::

    [memory]
    ceiling = "private"            # sessions above this class are neither indexed nor synced
    identity_ceiling = "public"    # identity edits only from sessions at or below this class;
                                   # every session starts at it (identity is in every prompt)
    stage_identity_writes = false  # true: identity edits wait in memory/staged/ for the owner

    [memory.honcho]
    url = "http://honcho.internal:8000"
    workspace = "boxmaker"         # our own workspace: finished turns are written here
    key_secret = "honcho_key"      # a key in [secrets]; leave out when Honcho runs without auth

    [[memory.honcho.workspaces]]   # workspaces ask_memory reads; untrusted unless marked
    id = "boxmaker"
    trusted = true
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from ..tools import DataClass
from ._common import ConfigPath, Seconds, Section, SocketMode

HONCHO_ID = re.compile(r"[a-zA-Z0-9_-]{1,512}")


def _check_honcho_id(value: str) -> str:
    if not HONCHO_ID.fullmatch(value):
        raise ValueError(f"a Honcho id is 1-512 of a-z, A-Z, 0-9, '_' and '-': {value!r}")
    return value


HonchoId = Annotated[str, AfterValidator(_check_honcho_id)]


class WorkspaceTrust(Section):
    id: HonchoId
    trusted: bool = False  # the brief: untrusted is the default


class HonchoSection(Section):
    url: str
    workspace: HonchoId = "boxmaker"
    owner_peer: HonchoId = "owner"
    agent_peer: HonchoId = "agent"
    key_secret: str | None = None
    workspaces: list[WorkspaceTrust] = Field(default_factory=list)
    request_timeout: Seconds = 30.0  # each read and write of an ordinary request
    chat_liveness: Seconds = 60.0  # dialectic chat: no bytes for this long means give up
    sync_interval: Seconds = 30.0  # how often the sync catches up when nothing kicks it
    batch: Annotated[int, Field(ge=1, le=100)] = 50  # messages per write (Honcho allows 100)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^/\s]+(/[^\s]*)?", value):
            raise ValueError("expected http(s)://HOST[:PORT][/PATH]")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _unique_workspaces(self) -> HonchoSection:
        ids = [w.id for w in self.workspaces]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"workspace listed twice: {', '.join(duplicates)}")
        return self

    def is_trusted(self, workspace: str) -> bool:
        return any(w.id == workspace and w.trusted for w in self.workspaces)

    def readable(self) -> list[str]:
        """Workspaces ask_memory may read: our own first, then the listed ones."""
        return [self.workspace, *(w.id for w in self.workspaces if w.id != self.workspace)]


class MemorySection(Section):
    socket: ConfigPath | None = None  # default: <paths.run>/memory.sock
    mode: SocketMode = 0o600  # loopd and brokerd connect
    group: str | None = None  # the group allowed to connect; default: the process's own
    # memory-owner.sock: the owner's undo, accept, reject and reindex, done by memoryd's user
    owner_socket: ConfigPath | None = None  # default: <paths.run>/memory-owner.sock
    owner_mode: SocketMode = 0o600
    owner_group: str | None = None
    ceiling: DataClass = DataClass.PRIVATE
    # The highest class identity (memory.md, user.md) may hold. Identity is in every session's
    # prompt, so brokerd starts every session at this class; public keeps public-only grants
    # usable. A session above it that adds to identity gets a note of its class instead.
    identity_ceiling: DataClass = DataClass.PUBLIC
    stage_identity_writes: bool = False
    recall_max_k: Annotated[int, Field(ge=1, le=100)] = 20
    snippet_chars: Annotated[int, Field(ge=40, le=4000)] = 400  # cap on each recall snippet
    honcho: HonchoSection | None = None

    @model_validator(mode="after")
    def _identity_within_ceiling(self) -> MemorySection:
        # Identity is in every session; above the ceiling no session would be indexed or synced.
        if self.identity_ceiling > self.ceiling:
            raise ValueError(f"identity_ceiling ({self.identity_ceiling.value}) may not be above "
                             f"ceiling ({self.ceiling.value})")
        return self
