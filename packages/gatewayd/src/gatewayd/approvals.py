"""Pending approvals and the ``!approve``/``!deny`` rules: pure, no I/O.

An approval is posted in its session's thread. A command is forwarded to brokerd only when it
comes from an allowlisted user, in that same thread, for an id that is pending; anything else is
refused with a reason that gatewayd replies in the thread. An id answers once: after an answer or
expiry it is "used".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bxcore.protocol.approval import ApprovalAnswer, ApprovalRequest

from .routing import Command


@dataclass
class PostedApproval:
    request: ApprovalRequest
    root_id: str  # the thread the approval was posted in
    channel_id: str
    answer: asyncio.Future[ApprovalAnswer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(frozen=True, kw_only=True)
class Forward:
    answer: ApprovalAnswer
    pending: PostedApproval


@dataclass(frozen=True, kw_only=True)
class CommandRefused:
    reason: str


class PostedApprovals:
    def __init__(self) -> None:
        self._pending: dict[str, PostedApproval] = {}
        self._used: set[str] = set()

    def add(self, request: ApprovalRequest, root_id: str, channel_id: str) -> PostedApproval:
        if request.id in self._pending or request.id in self._used:
            raise ValueError(f"approval id {request.id!r} was already seen")
        pending = PostedApproval(request=request, root_id=root_id, channel_id=channel_id)
        self._pending[request.id] = pending
        return pending

    def close(self, approval_id: str) -> None:
        """The approval is over (answered, expired, or brokerd went away): its id is used."""
        if self._pending.pop(approval_id, None) is not None:
            self._used.add(approval_id)

    def decide(self, command: Command, allowlist: frozenset[str]) -> Forward | CommandRefused:
        post = command.post
        if post.user_id not in allowlist:
            return CommandRefused(reason="you are not allowed to answer approvals")
        pending = self._pending.get(command.approval_id)
        if pending is None:
            if command.approval_id in self._used:
                return CommandRefused(reason=f"approval `{command.approval_id}` was already "
                                      "answered or has expired")
            return CommandRefused(reason=f"there is no approval `{command.approval_id}`")
        if post.thread_root != pending.root_id:
            return CommandRefused(reason=f"approval `{command.approval_id}` must be answered in "
                                  "its own thread")
        answer = ApprovalAnswer(id=command.approval_id, verdict=command.verdict, by=post.user_id)
        self.close(command.approval_id)
        if not pending.answer.done():
            pending.answer.set_result(answer)
        return Forward(answer=answer, pending=pending)
