"""gatewayd's socket, ``gateway.sock``: brokerd asks the owner to approve a call
(bxcore.protocol.approval); and ``run``/``serve``, which bind it beside the Gateway
(gateway.py) and run both until cancelled, or until SIGTERM.

brokerd connects once per approval, sends ``approval_request`` and waits on the same connection
for one ``approval_answer``. What is posted, and where, is owner_posts.py's; this reads the
request, waits for the owner's answer or for brokerd to close the connection first (the approval
has expired), and writes the answer. A local client may instead send ``owner_notice``:
``notice_posted`` answers once it is posted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bxcore.daemon import DEFAULT_MODE, Notifier, listening, run_until_signalled
from bxcore.errors import (
    ErrorCode,
    FrameError,
    LocalProtocolError,
    StreamEnded,
    StreamTimeout,
)
from bxcore.frames import Frame, error_frame
from bxcore.framestream import FrameStream, answer_our_bug
from bxcore.protocol.approval import (
    APPROVAL_ANSWER,
    APPROVAL_REQUEST,
    FROM_GATEWAYD,
    NOTICE_POSTED,
    OWNER_NOTICE,
    TO_GATEWAYD,
    ApprovalRequest,
    OwnerNotice,
)

from .gateway import Gateway
from .owner_posts import OwnerPosts, Refusal

log = logging.getLogger("gatewayd.approvals")


class ApprovalServer:
    def __init__(
        self, path: Path, posts: OwnerPosts, *, mode: int = DEFAULT_MODE,
        group: int | None = None, request_timeout: float = 30.0,
    ):
        self.path = path
        self._posts = posts
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
        stream = FrameStream(reader, writer, kinds=TO_GATEWAYD, sends=FROM_GATEWAYD)
        try:
            await self._serve(stream)
        except LocalProtocolError as exc:  # ours: logged as a bug, the peer told ``internal``
            await answer_our_bug(stream, exc, log)
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
        pending = await self._posts.approval(request)
        if isinstance(pending, Refusal):
            await _error(stream, pending.code, pending.message)
            return
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
        await self._posts.expired(pending)

    async def _notice(self, stream: FrameStream, notice: OwnerNotice) -> None:
        posted = await self._posts.notice(notice)
        if isinstance(posted, Refusal):
            await _error(stream, posted.code, posted.message)
            return
        await stream.write(Frame.of(NOTICE_POSTED, posted, final=True))


async def _error(stream: FrameStream, code: ErrorCode, message: str) -> None:
    log.warning("gateway.sock: %s: %s", code.value, message)
    with contextlib.suppress(StreamEnded):
        await stream.write(error_frame(code, message))


async def run(gateway: Gateway, ready: Callable[[], None] = lambda: None) -> None:
    """Run ``gateway`` with gateway.sock until cancelled. The socket is bound once the gateway
    knows who it is (approvals can then be posted), and ``ready`` called once it is bound; on
    the way out the socket closes first, then the gateway."""
    settings = gateway.settings
    try:
        await gateway.start()
        approvals = ApprovalServer(settings.gateway_socket, gateway.posts,
                                   mode=settings.gateway_socket_mode,
                                   group=settings.gateway_socket_group)
        await approvals.start()
        try:
            ready()
            await gateway.run()
        finally:
            await approvals.close()
    finally:
        await gateway.close()


async def serve(gateway: Gateway) -> None:
    """Run ``gateway`` until SIGTERM or SIGINT; READY=1 once gateway.sock is bound."""
    notifier = Notifier()
    await run_until_signalled(run(gateway, ready=notifier.ready), on_stop=notifier.stopping)
    logging.getLogger("gatewayd").info("gatewayd stopped")
