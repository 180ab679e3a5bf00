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

from bxcore.daemon import (
    DEFAULT_MODE,
    Connection,
    Notifier,
    answering,
    listening,
    run_until_signalled,
)
from bxcore.errors import StreamClosed
from bxcore.frames import Frame
from bxcore.protocol.approval import (
    APPROVAL_ANSWER,
    FROM_GATEWAYD,
    NOTICE_POSTED,
    OWNER_NOTICE,
    TO_GATEWAYD,
    ApprovalRequest,
    OwnerNotice,
)

from .gateway import Gateway
from .owner_posts import OwnerPosts

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
        handler = answering(self._answer, receives=TO_GATEWAYD, sends=FROM_GATEWAYD, log=log,
                            timeout=self._timeout)
        await self._listener.enter_async_context(
            listening(self.path, handler, mode=self._mode, group=self._group))

    async def close(self) -> None:
        """Stop accepting and remove the socket file."""
        await self._listener.aclose()

    async def _answer(self, frame: Frame, conn: Connection) -> Frame:
        if frame.kind == OWNER_NOTICE:
            posted = await self._posts.notice(frame.parse(OwnerNotice))
            return Frame.of(NOTICE_POSTED, posted, final=True)
        request = frame.parse(ApprovalRequest)  # the only other kind gateway.sock takes
        pending = await self._posts.approval(request)
        gone = asyncio.ensure_future(conn.read())  # brokerd closes on expiry
        try:
            waiting: set[asyncio.Future[Any]] = {pending.answer, gone}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            with contextlib.suppress(BaseException):
                await gone
        if not pending.answer.done():
            await self._posts.expired(pending)
            raise StreamClosed("brokerd closed the connection: the approval expired")
        answer = pending.answer.result()
        log.info("approval %s: %s by %s", request.id, answer.verdict, answer.by)
        return Frame.of(APPROVAL_ANSWER, answer, final=True)


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
