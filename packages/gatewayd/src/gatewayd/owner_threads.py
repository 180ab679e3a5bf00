"""The thread a session's messages to the owner go to: approvals, and notices such as a job's
answer.

A session gatewayd started (``mm-<root>``) has its thread. Any other session, a scheduled job's
run or a subagent, did not start in Mattermost: on its first message gatewayd opens a thread of
its own in the owner's DM with the bot, and every later message of that session goes there, so
the owner answers ``!approve``/``!deny`` in it like in any thread. The map lives in memory: after
a gatewayd restart the session's next message opens a new thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass

from bxcore.protocol.delegate import SUBAGENT_PREFIX

from .errors import GatewayError
from .rest import MattermostClient
from .routing import root_of_session

JOB_PREFIX = "job-"  # bxctl job run's sessions


class NoOwnerThread(GatewayError):
    """A session with no Mattermost thread, and no owner to open one with."""


@dataclass(frozen=True)
class Thread:
    channel_id: str
    root_id: str


def owner_of(configured: str | None, allowlist: Collection[str]) -> str | None:
    """Whom a session without a thread writes to: ``[gateway] owner``, else the allowlist's user
    when it lists exactly one, else nobody (pure)."""
    if configured is not None:
        return configured
    return next(iter(allowlist)) if len(allowlist) == 1 else None


def opening_text(session: str) -> str:
    """The root post of a session's own thread: what the session is."""
    if session.startswith(JOB_PREFIX):
        what = "Scheduled job run"
    elif session.startswith(SUBAGENT_PREFIX):
        what = "Subagent"
    else:
        what = "Session"
    return f"**{what}** `{session}`: its approvals and its answer follow in this thread."


class OwnerThreads:
    def __init__(self, rest: MattermostClient, owner: str | None):
        self._rest = rest
        self._owner = owner
        self._me = ""
        self._threads: dict[str, Thread] = {}
        self._opening = asyncio.Lock()  # one session's two first messages open one thread

    def start(self, me: str) -> None:
        self._me = me

    async def thread_for(self, session: str) -> Thread:
        """The session's thread, opened in the owner's DM if it has none. Raises NoOwnerThread,
        or MattermostError when Mattermost cannot be reached."""
        root = root_of_session(session)
        if root is not None:
            return Thread((await self._rest.get_post(root)).channel_id, root)
        async with self._opening:
            thread = self._threads.get(session)
            if thread is None:
                thread = await self._open(session)
                self._threads[session] = thread
            return thread

    async def _open(self, session: str) -> Thread:
        if self._owner is None:
            raise NoOwnerThread(
                f"session {session} has no Mattermost thread and no owner to open one with: set "
                "[gateway] owner (a Mattermost user id) or allowlist exactly one user")
        channel = await self._rest.direct_channel(self._me, self._owner)
        post = await self._rest.create_post(channel.id, opening_text(session),
                                            pending_post_id=f"thread:{session}")
        return Thread(channel.id, post.id)
