"""gatewayd's socket, ``gateway.sock``: brokerd asks the owner to approve a call
(bxcore.protocol.approval); and ``serve``, which runs the Gateway (gateway.py) until SIGTERM.

brokerd connects once per approval, sends ``approval_request`` and waits on the same connection
for one ``approval_answer``. gatewayd posts the request in the session's thread, with exactly what
will run, and answers when an allowlisted user replies ``!approve <id>`` or ``!deny <id>`` there.
When brokerd closes the connection first, the approval has expired; the thread is told so.
A session that did not start in Mattermost (a job's run, a subagent) has its approvals posted in
a DM thread of its own with the owner (owner_threads).

A local client may instead send ``owner_notice``: its text is posted in the session's thread
(the same one) and ``notice_posted`` answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bxcore.daemon import DEFAULT_MODE, Notifier, listening, run_until_signalled
from bxcore.errors import (
    ErrorCode,
    FrameError,
    StreamEnded,
    StreamTimeout,
    WireError,
)
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol.approval import (
    APPROVAL_ANSWER,
    APPROVAL_REQUEST,
    ERROR,
    NOTICE_POSTED,
    OWNER_NOTICE,
    TO_GATEWAYD,
    ApprovalRequest,
    NoticePosted,
    OwnerNotice,
)

from .approvals import PostedApprovals
from .errors import MattermostError
from .owner_threads import NoOwnerThread, OwnerThreads
from .render import approval_text, split_message
from .rest import MattermostClient

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger("gatewayd.approvals")

Say = Callable[[str, str, str], Awaitable[None]]  # (channel id, thread root, text)


class ApprovalServer:
    def __init__(
        self, path: Path, book: PostedApprovals, rest: MattermostClient, say: Say,
        *, threads: OwnerThreads, mode: int = DEFAULT_MODE, group: int | None = None,
        request_timeout: float = 30.0,
    ):
        self.path = path
        self._book = book
        self._rest = rest
        self._threads = threads
        self._say = say
        self._mode = mode
        self._group = group
        self._timeout = request_timeout
        self._listener = contextlib.AsyncExitStack()

    async def start(self) -> None:
        """Bind the socket with its mode and group (bxcore.daemon: a stale file is replaced)."""
        await self._listener.enter_async_context(
            listening(self.path, self._handle, mode=self._mode, group=self._group))

    async def close(self) -> None:
        """Stop accepting and remove the socket file."""
        await self._listener.aclose()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer, kinds=TO_GATEWAYD)
        try:
            await self._serve(stream)
        except StreamEnded as exc:
            log.info("gateway.sock: peer went away: %s", exc)
        finally:
            await stream.close()

    async def _serve(self, stream: FrameStream) -> None:
        try:
            frame = await stream.read(timeout=self._timeout)
            if frame.kind == OWNER_NOTICE:
                await self._notice(stream, frame.parse(OwnerNotice))
                return
            if frame.kind != APPROVAL_REQUEST:
                raise FrameError(f"expected {APPROVAL_REQUEST!r}, got {frame.kind!r}")
            request = frame.parse(ApprovalRequest)
        except (FrameError, StreamTimeout) as exc:
            await _error(stream, ErrorCode.BAD_FRAME, str(exc) or "no request in time")
            return
        try:
            thread = await self._threads.thread_for(request.session)
            root, channel_id = thread.root_id, thread.channel_id
            pending = self._book.add(request, root, channel_id)
        except (ValueError, NoOwnerThread) as exc:
            await _error(stream, ErrorCode.BAD_REQUEST, str(exc))
            return
        except MattermostError as exc:
            await _error(stream, ErrorCode.UNAVAILABLE, f"cannot reach Mattermost: {exc}")
            return
        try:
            text = approval_text(request.id, request.tool, request.arguments, request.grant,
                                 request.expires)
            for number, part in enumerate(split_message(text)):  # one part unless huge
                await self._rest.create_post(channel_id, part, root_id=root,
                                             pending_post_id=f"approval:{request.id}:{number}")
        except MattermostError as exc:
            self._book.close(request.id)
            await _error(stream, ErrorCode.UNAVAILABLE, f"cannot post the approval: {exc}")
            return
        log.info("approval %s posted in thread %s", request.id, root)
        gone = asyncio.ensure_future(stream.read())  # brokerd closes on expiry
        try:
            waiting: set[asyncio.Future[Any]] = {pending.answer, gone}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            with contextlib.suppress(BaseException):
                await gone
        if pending.answer.done():
            answer = pending.answer.result()
            await stream.write(Frame.of(APPROVAL_ANSWER, answer, final=True))
            log.info("approval %s: %s by %s", request.id, answer.verdict, answer.by)
            return
        self._book.close(request.id)
        log.info("approval %s expired (brokerd closed the connection)", request.id)
        await self._say(channel_id, root, f"_Approval `{request.id}` expired; the call was "
                        "not run._")


    async def _notice(self, stream: FrameStream, notice: OwnerNotice) -> None:
        """Post ``notice`` in its session's thread (opened in the owner's DM if need be)."""
        try:
            thread = await self._threads.thread_for(notice.session)
            posts = [await self._rest.create_post(thread.channel_id, part, root_id=thread.root_id)
                     for part in split_message(notice.text)]
        except NoOwnerThread as exc:
            await _error(stream, ErrorCode.BAD_REQUEST, str(exc))
            return
        except MattermostError as exc:
            await _error(stream, ErrorCode.UNAVAILABLE, f"cannot post the notice: {exc}")
            return
        log.info("notice for session %s posted in thread %s", notice.session, thread.root_id)
        body = NoticePosted(root_id=thread.root_id, post_id=posts[0].id)
        await stream.write(Frame.of(NOTICE_POSTED, body, final=True))


async def _error(stream: FrameStream, code: ErrorCode, message: str) -> None:
    log.warning("gateway.sock: %s: %s", code.value, message)
    with contextlib.suppress(StreamEnded):
        await stream.write(Frame.of(ERROR, WireError(code=code, message=message), final=True))


async def serve(gateway: Gateway) -> None:
    """Run ``gateway`` until SIGTERM or SIGINT; READY=1 once gateway.sock is bound."""
    notifier = Notifier()
    await run_until_signalled(gateway.run(ready=notifier.ready), on_stop=notifier.stopping)
    logging.getLogger("gatewayd").info("gatewayd stopped")
