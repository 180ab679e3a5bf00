"""Deliver one queued post to loopd and show the turn in its thread. I/O shell over render.py.

One loop.sock connection per turn (bxcore.protocol.loop): send ``turn``, read frames until one is
final. The placeholder is posted at once (and remembered in the queue, so a retry edits the same
post), edited as events arrive, and replaced by the answer; the rest of a long answer follows as
further replies in the thread. What carries model text is made inert (render.py says when).

Every delivery of a post names it with ``origin = mattermost:<post_id>``: a post is marked
delivered only once loopd's first frame arrives, so a crash just after the ``turn`` was written
delivers it again on restart, and loopd answers that resend with the first turn's answer instead
of running it twice (exactly once end to end; docs/protocol.md).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from pathlib import Path

from bxcore.errors import (
    ErrorCode,
    FrameError,
    LocalProtocolError,
    StreamEnded,
    StreamTimeout,
    WireError,
)
from bxcore.frames import Frame
from bxcore.framestream import FrameStream, PeerUnavailable
from bxcore.protocol.loop import (
    ERROR,
    FROM_LOOPD,
    TO_LOOPD,
    TURN,
    TURN_DONE,
    TURN_EVENT,
    Turn,
    TurnDone,
    TurnEvent,
)
from bxcore.tools import DataClass

from .errors import MattermostError
from .inert import inert_prose
from .queue import Item, Queue
from .render import PLACEHOLDER, Throttle, TurnView, answer_is_inert, answer_posts
from .rest import MattermostClient

log = logging.getLogger("gatewayd.turns")

DOWN_NOTE = "_The agent is not running right now; your message is queued and will be answered._"
BUSY_NOTE = "_Waiting for the previous message in this thread to finish…_"


class TurnOutcome(enum.Enum):
    DELIVERED = "delivered"  # loopd took the turn (answered or failed it): never send it again
    BUSY = "busy"  # loopd is running another turn of this session: try again soon
    DOWN = "down"  # loopd cannot be reached, or dropped the turn before taking it


class _Again(Exception):
    """loopd refused the resume flag (no_such_session / session_exists): ask again, flipped."""


class TurnRunner:
    def __init__(
        self,
        rest: MattermostClient,
        queue: Queue,
        loop_socket: Path,
        *,
        edit_interval: float,
        read_timeout: float = 1800.0,
        tool_choice: tuple[str, ...] = (),
        inert_always: bool = False,
        identity_floor: DataClass = DataClass.PUBLIC,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._rest = rest
        self._queue = queue
        self._socket = loop_socket
        self._edit_interval = edit_interval
        self._read_timeout = read_timeout
        self._clock = clock
        self._tool_choice = list(tool_choice)
        self._inert_always = inert_always
        self._identity_floor = identity_floor

    async def deliver(self, item: Item) -> TurnOutcome:
        placeholder = item.placeholder or await self._post_placeholder(item)
        resume = item.resume
        for flipped in (False, True):
            try:
                stream = await FrameStream.connect(self._socket, kinds=FROM_LOOPD, sends=TO_LOOPD)
            except PeerUnavailable as exc:
                log.info("post %s: loopd unavailable (%s)", item.post_id, exc)
                if item.attempts == 0:
                    await self._edit(placeholder, DOWN_NOTE)
                return TurnOutcome.DOWN
            try:
                return await self._converse(stream, item, placeholder, resume)
            except _Again:
                if flipped:
                    break
                resume = not resume
                log.info("post %s: retrying with resume=%s", item.post_id, resume)
            finally:
                await stream.close()
        await self._edit(placeholder, "⚠ the agent refused this thread's session")
        self._queue.delivered(item.post_id)
        return TurnOutcome.DELIVERED

    async def _post_placeholder(self, item: Item) -> str:
        post = await self._rest.create_post(
            item.channel_id, PLACEHOLDER, root_id=item.root_id,
            pending_post_id=f"{item.post_id}:placeholder",
        )
        self._queue.set_placeholder(item.post_id, post.id)
        return post.id

    async def _converse(
        self, stream: FrameStream, item: Item, placeholder: str, resume: bool
    ) -> TurnOutcome:
        turn = Turn.model_validate({"session": item.session, "content": item.content,
                                    "resume": resume, "tool_choice": self._tool_choice,
                                    "origin": f"mattermost:{item.post_id}"})
        view = TurnView()
        throttle = Throttle(self._edit_interval)
        throttle.due(self._clock())  # the placeholder itself was the first write
        accepted = False
        try:
            await stream.write(Frame.of(TURN, turn, final=False))
            while True:
                frame = await stream.read(timeout=self._read_timeout)
                if frame.kind == TURN_EVENT:
                    if not accepted:
                        accepted = True
                        self._queue.delivered(item.post_id)
                    view.apply(frame.parse(TurnEvent).event)
                    if throttle.due(self._clock()):
                        await self._edit(placeholder, view.text(), inert=True)
                elif frame.kind == TURN_DONE:
                    self._queue.delivered(item.post_id)
                    await self._answer(item, placeholder, frame.parse(TurnDone))
                    return TurnOutcome.DELIVERED
                elif frame.kind == ERROR:
                    return await self._refused(item, placeholder, frame.parse(WireError), resume)
        except LocalProtocolError as exc:  # ours, not loopd's: retrying would fail the same way
            log.error("our bug, not loopd's: post %s: %s", item.post_id, exc, exc_info=exc)
            self._queue.delivered(item.post_id)
            await self._edit(placeholder, "⚠ _a bug in gatewayd: the message was not sent_")
            return TurnOutcome.DELIVERED
        except (StreamEnded, FrameError, StreamTimeout) as exc:
            log.warning("post %s: loop.sock: %s", item.post_id, exc or type(exc).__name__)
            if not accepted:
                return TurnOutcome.DOWN
            await self._edit(placeholder, view.text() + "\n\n⚠ _the agent stopped mid-turn_",
                             inert=True)
            return TurnOutcome.DELIVERED

    async def _refused(
        self, item: Item, placeholder: str, error: WireError, resume: bool
    ) -> TurnOutcome:
        if error.code == ErrorCode.SESSION_BUSY:
            if item.attempts == 0:
                await self._edit(placeholder, BUSY_NOTE)
            return TurnOutcome.BUSY
        if (error.code, resume) in ((ErrorCode.NO_SUCH_SESSION, True),
                                    (ErrorCode.SESSION_EXISTS, False)):
            raise _Again()
        self._queue.delivered(item.post_id)
        await self._edit(placeholder, f"⚠ {error.code.value}: {inert_prose(error.message)}",
                         inert=True)
        return TurnOutcome.DELIVERED

    async def _answer(self, item: Item, placeholder: str, done: TurnDone) -> None:
        inert = answer_is_inert(done.taint, floor=self._identity_floor,
                                always=self._inert_always)
        parts = answer_posts(done.content, inert=inert)
        await self._edit(placeholder, parts[0], inert=inert)
        for number, part in enumerate(parts[1:], start=1):
            try:
                await self._rest.create_post(
                    item.channel_id, part, root_id=item.root_id, inert=inert,
                    pending_post_id=f"{item.post_id}:part{number}",
                )
            except MattermostError as exc:
                log.error("post %s: part %d of the answer not posted: %s",
                          item.post_id, number, exc)

    async def _edit(self, post_id: str, text: str, *, inert: bool = False) -> None:
        try:
            await self._rest.patch_post(post_id, text, inert=inert)
        except MattermostError as exc:
            log.warning("edit of %s failed: %s", post_id, exc)
