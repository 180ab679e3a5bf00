"""What gateway.sock's requests post for the owner (sockets.py reads and answers the frames).

An approval request is posted in its session's thread, with exactly what will run; it is
answered when an allowlisted user replies ``!approve <id>`` or ``!deny <id>`` there
(approvals.py). When brokerd closes the connection first, the approval has expired; the thread
is told so. A session that did not start in Mattermost (a job's run, a subagent) has its
approvals posted in a DM thread of its own with the owner (owner_threads). An ``owner_notice``'s
text is posted in the session's thread (the same one).

A notice's text (a job's answer) is posted inert, whatever its session: the notice does not say
the session's taint (docs/decisions/output-channels.md).

What cannot be posted is ``Refused``, with the error code and message gateway.sock answers with.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bxcore.errors import ErrorCode, Refused
from bxcore.protocol.approval import ApprovalRequest, NoticePosted, OwnerNotice

from .approvals import PostedApproval, PostedApprovals
from .errors import MattermostError
from .inert import inert_posts
from .owner_threads import NoOwnerThread, OwnerThreads
from .render import approval_posts
from .rest import MattermostClient

log = logging.getLogger("gatewayd.approvals")

Say = Callable[[str, str, str], Awaitable[None]]  # (channel id, thread root, text)


class OwnerPosts:
    def __init__(self, book: PostedApprovals, rest: MattermostClient, say: Say, *,
                 threads: OwnerThreads):
        self._book = book
        self._rest = rest
        self._threads = threads
        self._say = say

    async def approval(self, request: ApprovalRequest) -> PostedApproval:
        """Post ``request`` in its session's thread; the pending approval waits for its answer."""
        try:
            thread = await self._threads.thread_for(request.session)
            root, channel_id = thread.root_id, thread.channel_id
            pending = self._book.add(request, root, channel_id)
        except (ValueError, NoOwnerThread) as exc:
            raise Refused(str(exc), ErrorCode.BAD_REQUEST) from exc
        except MattermostError as exc:
            raise Refused(f"cannot reach Mattermost: {exc}", ErrorCode.UNAVAILABLE) from exc
        try:
            parts = approval_posts(request.id, request.tool, request.arguments, request.grant,
                                   request.expires)
            for number, part in enumerate(parts):  # one part unless huge, each fenced
                await self._rest.create_post(channel_id, part, root_id=root, inert=True,
                                             pending_post_id=f"approval:{request.id}:{number}")
        except MattermostError as exc:
            self._book.close(request.id)
            raise Refused(f"cannot post the approval: {exc}", ErrorCode.UNAVAILABLE) from exc
        log.info("approval %s posted in thread %s", request.id, root)
        return pending

    async def expired(self, pending: PostedApproval) -> None:
        """brokerd closed the connection before an answer: the id is used, the thread told."""
        request = pending.request
        self._book.close(request.id)
        log.info("approval %s expired (brokerd closed the connection)", request.id)
        await self._say(pending.channel_id, pending.root_id,
                        f"_Approval `{request.id}` expired; the call was not run._")

    async def notice(self, notice: OwnerNotice) -> NoticePosted:
        """Post ``notice`` in its session's thread (opened in the owner's DM if need be)."""
        try:
            thread = await self._threads.thread_for(notice.session)
            posts = [await self._rest.create_post(thread.channel_id, part, root_id=thread.root_id,
                                                  inert=True)
                     for part in inert_posts(notice.text)]
        except NoOwnerThread as exc:
            raise Refused(str(exc), ErrorCode.BAD_REQUEST) from exc
        except MattermostError as exc:
            raise Refused(f"cannot post the notice: {exc}", ErrorCode.UNAVAILABLE) from exc
        log.info("notice for session %s posted in thread %s", notice.session, thread.root_id)
        return NoticePosted(root_id=thread.root_id, post_id=posts[0].id)
