"""gatewayd's logic: posts routed into the queue, the queue's dispatcher delivering turns to
loopd, the owner's !approve/!deny answered, the WebSocket, the dispatcher and each turn it
delivers in one task group.
gateway.sock is sockets.py's: it binds the socket once ``start`` has run and hands brokerd's
requests to ``posts`` (owner_posts.py).

    Mattermost ──ws──> route ──> queue (SQLite) ──> dispatcher ──loop.sock──> loopd
        ^                 └──> !approve/!deny ──> approvals <──gateway.sock── brokerd
        └──────── REST: placeholder, edits, answers, approval posts ────────┘
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from .approvals import Forward, PostedApprovals
from .errors import MattermostError
from .events import Event, Posted
from .models import Post
from .owner_posts import OwnerPosts
from .owner_threads import OwnerThreads, owner_of
from .queue import Item, Queue
from .rest import MattermostClient
from .routing import Command, Ignore, Refuse, TurnPost, route
from .settings import Settings
from .stream import backoff_delay
from .turns import TurnOutcome, TurnRunner
from .websocket import MattermostSocket

log = logging.getLogger("gatewayd")

CATCH_UP_SLACK_MS = 60_000  # read this far behind the newest post seen: clocks and races


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.rest = MattermostClient(
            settings.server, settings.token, retries=settings.retries,
            timeout=settings.request_timeout,
        )
        self.queue = Queue(settings.state / "queue.sqlite3")
        self.book = PostedApprovals()
        self.threads = OwnerThreads(self.rest, owner_of(settings.owner, settings.allowlist))
        self.runner = TurnRunner(self.rest, self.queue, settings.loop_socket,
                                 edit_interval=settings.edit_interval,
                                 tool_choice=settings.tool_choice,
                                 inert_always=settings.inert_always,
                                 identity_floor=settings.identity_floor)
        self.posts = OwnerPosts(self.book, self.rest, self.say, threads=self.threads)
        self.socket = MattermostSocket(
            settings.server, settings.token, on_event=self.on_event, on_catch_up=self.catch_up,
            reconnect_min=settings.reconnect[0], reconnect_max=settings.reconnect[1],
            ping_interval=settings.ping_interval,
        )
        self.me = ""
        self._dm_channels: dict[str, str] = {}  # channel id -> the allowlisted user
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Learn who the bot is and its DM channels, so that approvals can be posted."""
        self.me = (await self.rest.me()).id
        self.threads.start(self.me)
        for user in sorted(self.settings.allowlist):
            channel = await self.rest.direct_channel(self.me, user)
            self._dm_channels[channel.id] = user
        if self.queue.watermark() is None:  # first start: nothing before now is ours
            self.queue.set_watermark(int(time.time() * 1000))

    async def run(self) -> None:
        """Carry posts until cancelled (after ``start``): the WebSocket, the dispatcher and the
        turns it delivers, in one task group; cancelled, it stops the turns being delivered
        (the queue redelivers them)."""
        log.info("gatewayd ready as %s; %d allowlisted user(s)", self.me,
                 len(self.settings.allowlist))
        async with asyncio.TaskGroup() as group:
            group.create_task(self.socket.run())
            group.create_task(self._dispatch(group))

    async def close(self) -> None:
        """Close the connections (once ``run`` has ended)."""
        await self.rest.aclose()
        self.queue.close()

    # -- from Mattermost --------------------------------------------------------------------
    async def on_event(self, event: Event) -> None:
        if isinstance(event, Posted):  # edits and deletions are not acted on
            await self.take(event.post, event.channel_type)

    async def catch_up(self) -> None:
        """Events may have been lost: read every served channel's posts since the watermark."""
        since = (self.queue.watermark() or 0) - CATCH_UP_SLACK_MS
        served = [(c, "D") for c in self._dm_channels]
        served += [(c, "O") for c in sorted(self.settings.channels)]
        for channel_id, channel_type in served:
            posts = await self.rest.posts_since(channel_id, since)
            for post in posts.in_order():
                if post.create_at >= since:
                    await self.take(post, channel_type)

    async def take(self, post: Post, channel_type: str) -> None:
        decision = route(post, channel_type, me=self.me, allowlist=self.settings.allowlist,
                         channels=self.settings.channels)
        if isinstance(decision, Ignore):
            log.debug("post %s ignored: %s", post.id, decision.reason)
        elif isinstance(decision, Refuse):
            log.info("post %s from user %s in channel %s refused: %s", post.id, post.user_id,
                     post.channel_id, decision.reason)
        elif isinstance(decision, TurnPost):
            if self.queue.offer(_item(post, decision.session, decision.resume)):
                log.info("post %s queued for session %s", post.id, decision.session)
                self._wake.set()
        elif isinstance(decision, Command) and self.queue.offer(
            _item(post, "", False), handled=True
        ):
            await self._command(decision)

    async def _command(self, command: Command) -> None:
        post = command.post
        outcome = self.book.decide(command, self.settings.allowlist)
        if isinstance(outcome, Forward):
            mark = "✅ approved" if outcome.answer.verdict == "approve" else "⛔ denied"
            text = f"{mark} `{command.approval_id}`"
        else:
            log.info("approval command in post %s by %s refused: %s", post.id, post.user_id,
                     outcome.reason)
            text = f"⚠ Not accepted: {outcome.reason}."
        await self.say(post.channel_id, post.thread_root, text)

    async def say(self, channel_id: str, root_id: str, text: str) -> None:
        try:
            await self.rest.create_post(channel_id, text, root_id=root_id)
        except MattermostError as exc:
            log.warning("could not reply in thread %s: %s", root_id, exc)

    # -- to loopd ---------------------------------------------------------------------------
    async def _dispatch(self, group: asyncio.TaskGroup) -> None:
        while True:
            self._wake.clear()
            for item in self.queue.heads(time.time(), busy=set(self._running)):
                self._running[item.session] = group.create_task(self._deliver(item))
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # meets the event being set, and the dispatcher would outlive SIGTERM.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.redeliver[0]):
                    await self._wake.wait()

    async def _deliver(self, item: Item) -> None:
        try:
            try:
                outcome = await self.runner.deliver(item)
            except MattermostError as exc:
                log.warning("post %s: Mattermost failed during delivery: %s", item.post_id, exc)
                outcome = TurnOutcome.DOWN
            except Exception as exc:  # the turn is tried again later, the others go on
                log.error("post %s: our bug, not loopd's or Mattermost's: %s", item.post_id,
                          exc, exc_info=exc)
                outcome = TurnOutcome.DOWN
            if outcome is not TurnOutcome.DELIVERED:
                low, high = self.settings.redeliver
                delay = backoff_delay(item.attempts + 1, minimum=low, maximum=high)
                self.queue.defer(item.post_id, time.time() + delay)
        finally:
            self._running.pop(item.session, None)
            self._wake.set()


def _item(post: Post, session: str, resume: bool) -> Item:
    return Item(
        post_id=post.id, session=session, resume=resume, channel_id=post.channel_id,
        root_id=post.thread_root, user_id=post.user_id, content=post.message,
        create_at=post.create_at,
    )
