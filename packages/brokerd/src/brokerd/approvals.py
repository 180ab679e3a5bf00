"""Approvals for ``ask`` calls: the pure book of pending approvals, and the asyncio desk that
suspends a call until the owner answers or the approval expires (expiry is a denial).

An approval id is 192 random bits, bound to one call (session, call number, tool and the hash
of its arguments) and good for one answer. Only answers from the owner's allowlist count; an
answer from anyone else is refused and the call keeps waiting.

Who answered on approve.sock is settled by ``local_approver`` from the socket peer's uid; gatewayd
reports Mattermost user ids, and an answer it relays naming a ``local:`` approver is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from bxcore.config.broker import LOCAL_SOCKET
from bxcore.errors import BoxmakerError, LocalProtocolError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import approval as wire
from bxcore.tools import ToolRequest
from bxcore.util import format_rfc3339, sha256

from .errors import ApprovalExpired, ApprovalMismatch, NotAnApprover, UnknownApproval

log = logging.getLogger("brokerd.approvals")


@dataclass
class _Pending:
    request: wire.ApprovalRequest
    deadline: datetime
    answer: wire.ApprovalAnswer | None = None


def new_approval_id() -> str:
    return secrets.token_urlsafe(24)


def local_approver(uid: int, approvers: frozenset[str], overflow_uid: int) -> str:
    """Who answered on approve.sock, as ``by``: the peer's ``uid`` (from the kernel) checked
    against ``approvers``. Pure: the caller reads the overflow uid.

    ``local:<uid>`` when that entry is listed and ``uid`` is a real one. Otherwise, when
    ``local:socket`` is listed, ``local:socket(uid <uid>)``: admitted because it could open the
    socket, with the uid it was seen as. The overflow uid is what a user namespace shows for a
    peer it does not map, so it names nobody: ``local:<overflow>`` never admits it.
    Raises NotAnApprover."""
    if uid != overflow_uid and f"local:{uid}" in approvers:
        return f"local:{uid}"
    if LOCAL_SOCKET in approvers:
        return f"{LOCAL_SOCKET}(uid {uid})"
    if uid == overflow_uid:
        raise NotAnApprover(
            f"the peer's uid is the overflow uid {uid}: brokerd runs in a user namespace that "
            "does not map the caller, so the uid names nobody (an entry for it would admit "
            f"anyone who can reach approve.sock); list \"{LOCAL_SOCKET}\" in [broker] approvers "
            "and let approve.sock's directory admit only the owner's users"
        )
    raise NotAnApprover(f"local:{uid} is not on the owner's list of approvers")


def came_through_socket(by: str) -> bool:
    """Whether ``by`` is the ``local:socket(...)`` form local_approver gives."""
    return by.startswith(f"{LOCAL_SOCKET}(")


@dataclass
class ApprovalBook:
    """Pending approvals and their answers. Pure: the caller passes the time."""

    approvers: frozenset[str]
    ttl: timedelta
    new_id: Callable[[], str] = new_approval_id
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _used: set[str] = field(default_factory=set)

    def open(self, request: ToolRequest, grant: str, now: datetime) -> wire.ApprovalRequest:
        approval = wire.ApprovalRequest(
            id=self.new_id(), session=request.session, tool=request.tool,
            arguments=request.arguments,
            arguments_sha256=sha256(request.arguments.encode("utf-8")),
            grant=grant, expires=format_rfc3339(now + self.ttl),
        )
        self._pending[approval.id] = _Pending(approval, now + self.ttl)
        return approval

    def answer(self, answer: wire.ApprovalAnswer, now: datetime) -> None:
        """Record an answer. Raises UnknownApproval (never issued, or already answered or
        closed), ApprovalExpired, or NotAnApprover (the call keeps waiting)."""
        pending = self._pending.get(answer.id)
        if pending is None or pending.answer is not None:
            used = answer.id in self._used or pending is not None
            raise UnknownApproval("this approval was already used" if used else
                                  "no pending approval has this id")
        if now >= pending.deadline:
            raise ApprovalExpired(f"approval {answer.id} expired at {pending.request.expires}")
        if not self.counts(answer.by):
            raise NotAnApprover(f"{answer.by} is not on the owner's list of approvers")
        pending.answer = answer

    def counts(self, by: str) -> bool:
        """Whether an answer by ``by`` counts: it is listed, or it is local_approver's
        ``local:socket(...)`` and ``local:socket`` is listed."""
        return by in self.approvers or (LOCAL_SOCKET in self.approvers
                                        and came_through_socket(by))

    def outcome(self, approval_id: str, tool: str, arguments_sha256: str
                ) -> wire.ApprovalAnswer | None:
        """The answer for this call, None while it has none. Raises ApprovalMismatch when the
        id was issued for another call, UnknownApproval when it is unknown or used."""
        pending = self._pending.get(approval_id)
        if pending is None:
            raise UnknownApproval("no pending approval has this id")
        bound = pending.request
        if (bound.tool, bound.arguments_sha256) != (tool, arguments_sha256):
            raise ApprovalMismatch(f"approval {approval_id} was issued for another call")
        return pending.answer

    def close(self, approval_id: str) -> None:
        """Forget an approval (answered, expired or abandoned): its id is used up."""
        self._pending.pop(approval_id, None)
        self._used.add(approval_id)

    def pending(self, now: datetime) -> list[wire.ApprovalRequest]:
        return [p.request for p in self._pending.values()
                if p.answer is None and now < p.deadline]


@dataclass(frozen=True)
class ApprovalOutcome:
    approved: bool
    reason: str
    approval: str
    by: str | None


Waiting = Callable[[wire.ApprovalRequest], Awaitable[None]]


class ApprovalDesk:
    """Suspends a call on its approval, offers it to gatewayd, takes answers from any channel."""

    def __init__(self, book: ApprovalBook, *, clock: Callable[[], datetime],
                 gateway_socket: Path | None, waiting_interval: float):
        self.book = book
        self._clock = clock
        self._gateway = gateway_socket
        self.interval = waiting_interval  # also the running call's (service)
        self._events: dict[str, asyncio.Event] = {}

    def pending(self) -> list[wire.ApprovalRequest]:
        return self.book.pending(self._clock())

    def answer(self, answer: wire.ApprovalAnswer) -> wire.ApprovalAck:
        """Take an answer from a channel; ApprovalError when it does not count."""
        self.book.answer(answer, self._clock())
        event = self._events.get(answer.id)
        if event is not None:
            event.set()
        return wire.ApprovalAck(id=answer.id, verdict=answer.verdict)

    def open(self, request: ToolRequest, grant: str) -> wire.ApprovalRequest:
        """Open an approval for ``request``; ``wait`` for it next."""
        approval = self.book.open(request, grant, self._clock())
        self._events[approval.id] = asyncio.Event()
        return approval

    def abandon(self, approval: wire.ApprovalRequest) -> None:
        """Close an approval that will not be waited for (its call ended before the ask)."""
        self._events.pop(approval.id, None)
        self.book.close(approval.id)

    async def wait(self, approval: wire.ApprovalRequest, on_waiting: Waiting) -> ApprovalOutcome:
        """Offer ``approval`` to gatewayd and wait for an answer that counts, or expiry.
        ``on_waiting`` is called at once and every ``waiting_interval`` seconds meanwhile."""
        event = self._events[approval.id]
        offer = asyncio.create_task(self._offer_to_gateway(approval))
        try:
            clock = asyncio.get_running_loop().time
            deadline = clock() + self.book.ttl.total_seconds()
            await on_waiting(approval)  # at once, even when an answer came in already
            while not event.is_set():
                left = deadline - clock()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(left, self.interval))
                if not event.is_set():
                    await on_waiting(approval)
            answer = self.book.outcome(approval.id, approval.tool, approval.arguments_sha256)
        finally:
            offer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await offer
            self._events.pop(approval.id, None)
            self.book.close(approval.id)
        if answer is None:
            return ApprovalOutcome(False, f"approval {approval.id} expired unanswered",
                                   approval.id, None)
        approved = answer.verdict == "approve"
        verb = "approved" if approved else "denied"
        return ApprovalOutcome(approved, f"{verb} by {answer.by}", approval.id, answer.by)

    async def _offer_to_gateway(self, approval: wire.ApprovalRequest) -> None:
        """Send the request to gatewayd and feed its answers in until one counts. A gatewayd that
        is down is logged; the approval still waits for bxctl on approve.sock."""
        if self._gateway is None:
            return
        try:
            stream = await FrameStream.connect(self._gateway, wire.FROM_GATEWAYD,
                                               sends=wire.TO_GATEWAYD)
        except BoxmakerError as exc:
            log.warning("approval %s not sent to gatewayd: %s", approval.id, exc)
            return
        try:
            await stream.write(Frame.of(wire.APPROVAL_REQUEST, approval, final=True))
            while True:
                frame = await stream.read()
                if frame.kind == wire.ERROR:
                    log.warning("gatewayd refused approval %s: %s", approval.id, frame.body)
                    return
                try:
                    answer = frame.parse(wire.ApprovalAnswer)
                    if answer.id != approval.id:
                        raise UnknownApproval(f"answer for {answer.id} on the connection of "
                                              f"approval {approval.id}")
                    if answer.by.startswith("local:"):
                        raise NotAnApprover(f"gatewayd relays Mattermost users, not {answer.by}")
                    self.answer(answer)
                    return
                except BoxmakerError as exc:
                    log.warning("answer from gatewayd to %s does not count: %s", approval.id, exc)
        except BoxmakerError as exc:
            log.warning("gatewayd connection for approval %s ended: %s", approval.id, exc)
        except LocalProtocolError as exc:  # ours, not gatewayd's: bxctl can still answer
            log.error("our bug, not gatewayd's: approval %s: %s", approval.id, exc, exc_info=exc)
        finally:
            await stream.close()
