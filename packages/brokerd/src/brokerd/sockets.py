"""The socket shells: ``broker.sock`` (loopd's tool calls) and ``approve.sock`` (local
``bxctl approve``/``deny``), bound by ``serve``. One connection per request, served by
bxcore.daemon.answering (each frame read takes its own timeout; every failure is mapped to its
error frame there: brokerd's own errors that carry a code, bxcore Refused, cross with it); what a
call does is calls.py's.

On approve.sock the approver is whoever the kernel says is connected (SO_PEERCRED), written as
``local:<uid>``, or ``local:socket(uid <uid>)`` when ``local:socket`` admits any peer
(approvals.local_approver): the ``by`` a client claims is replaced, never trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from bxcore import daemon
from bxcore.config import Config
from bxcore.config.broker import LOCAL_SOCKET, LOCAL_UID
from bxcore.daemon import (
    Answerer,
    Connection,
    Notifier,
    answering,
    listening,
    run_until_signalled,
    wait_forever,
)
from bxcore.errors import FrameError, Refused, RemoteProtocolError
from bxcore.frames import Frame
from bxcore.peers import PeerPolicy, overflow_uid
from bxcore.protocol import approval as approval_wire
from bxcore.protocol import broker as broker_wire
from bxcore.protocol import delegate as delegate_wire
from bxcore.tools import ToolRequest

from .approvals import local_approver
from .calls import Broker
from .unfinished import FOUND_AT_START, STOPPED_BEFORE_END, Unfinished

log = logging.getLogger("brokerd.sockets")

# Seconds a stop waits for the running calls to be killed and audited: under systemd's
# default TimeoutStopSec (90 s), so that brokerd, not systemd, decides what happens then.
STOP_TIMEOUT = 60.0
RECANCEL_EVERY = 1.0  # seconds between cancellations of a call that has not ended yet


class LoopChildren:
    """A delegate call's child, run by loopd on the call's own connection: ``delegate_run`` out,
    ``delegate_done`` back (no timeout: the child's turn is as long as its rounds; loopd going
    away ends the wait with StreamClosed)."""

    def __init__(self, conn: Connection):
        self._conn = conn

    async def run(self, order: delegate_wire.DelegateRun) -> delegate_wire.DelegateDone:
        await self._conn.send(Frame.of(delegate_wire.DELEGATE_RUN, order, final=False))
        frame = await self._conn.read()
        if frame.kind != delegate_wire.DELEGATE_DONE or not frame.final:
            raise FrameError(f"expected a final {delegate_wire.DELEGATE_DONE!r}, got "
                             f"{frame.kind!r}")
        return frame.parse(delegate_wire.DelegateDone)


def tool_call(broker: Broker) -> Answerer:
    """broker.sock's answer to one tool request, audited whatever it holds: one that is not a
    tool request is audited as refused (bxcore.daemon.answering answers it, and every failure
    inside brokerd, with an error frame: never a dropped connection)."""

    async def answer(frame: Frame, conn: Connection) -> Frame:
        try:
            request = frame.parse(ToolRequest)
        except FrameError as exc:
            await broker.refuse(f"not a tool request: {exc}", body=frame.body)
            raise Refused(str(exc)) from exc

        async def waiting(body: broker_wire.ToolWaiting) -> None:
            await conn.send(Frame.of(broker_wire.TOOL_WAITING, body, final=False))

        response = await broker.call(request, waiting, LoopChildren(conn))
        return Frame.of(broker_wire.TOOL_RESPONSE, response, final=True)

    return answer


def approval(broker: Broker, overflow: int) -> Answerer:
    """approve.sock's answer: the pending approvals, or an answer to one, for an approver."""

    async def answer(frame: Frame, conn: Connection) -> Frame:
        uid = conn.peer().uid
        if frame.kind == approval_wire.APPROVAL_LIST:
            local_approver(uid, broker.desk.book.approvers, overflow)  # the arguments: theirs
            body = approval_wire.ApprovalPending(approvals=broker.desk.pending())
            return Frame.of(approval_wire.APPROVAL_PENDING, body, final=True)
        try:
            claimed = frame.parse(approval_wire.ApprovalAnswer)
        except FrameError as exc:
            raise Refused(str(exc)) from exc
        by = local_approver(uid, broker.desk.book.approvers, overflow)
        ack = broker.desk.answer(claimed.model_copy(update={"by": by}))
        return Frame.of(approval_wire.APPROVAL_ACK, ack, final=True)

    return answer


def handlers(broker: Broker, overflow: int | None = None) -> tuple[daemon.Handler, daemon.Handler]:
    """(broker.sock's, approve.sock's); ``overflow`` defaults to the kernel's overflow uid. A
    broker.sock request that cannot even be read is audited as refused too."""
    overflow = overflow_uid() if overflow is None else overflow
    approvers = broker.desk.book.approvers
    if f"local:{overflow}" in approvers and LOCAL_SOCKET not in approvers:
        log.warning('[broker] approvers lists local:%d, the overflow uid, which names nobody and '
                    'is refused: use "local:socket" and gate approve.sock\'s directory', overflow)

    async def unreadable(exc: RemoteProtocolError) -> None:
        await broker.refuse(f"the request frame could not be decoded: {exc}")

    return (
        answering(tool_call(broker), receives=broker_wire.TO_BROKERD,
                  sends=broker_wire.FROM_BROKERD, log=log, unreadable=unreadable),
        answering(approval(broker, overflow), receives=approval_wire.TO_APPROVE_SOCKET,
                  sends=approval_wire.FROM_APPROVE_SOCKET, log=log),
    )


def local_uids(approvers: list[str]) -> frozenset[int]:
    """The uids ``local:<uid>`` approvers name."""
    return frozenset(int(a.removeprefix("local:")) for a in approvers if LOCAL_UID.fullmatch(a))


class Connections:
    """The connections brokerd is serving, and whether it still takes new ones. A stop closes
    it first: asyncio may start the task of a connection it accepted just before the listener
    closed after the stop has looked, and that task must do no work (it could start a call
    nothing would end)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False


def tracked(handle: daemon.Handler, connections: Connections) -> daemon.Handler:
    """``handle``, its task in ``connections`` while it runs (so that a stop can end it); a
    connection that starts once the stop began is closed unanswered."""

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if connections.closed:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        connections.tasks.add(task)
        try:
            await handle(reader, writer)
        except asyncio.CancelledError:
            return  # brokerd is stopping (end_calls): the call is audited; nothing to report
        finally:
            connections.tasks.discard(task)

    return one


def waiting_at(task: object) -> list[str]:
    """Where ``task`` waits, innermost last, through the tasks it awaits (a stop's report)."""
    found: list[str] = []
    while isinstance(task, asyncio.Task):
        step: object = task.get_coro()
        while step is not None:
            frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
            if frame is not None:
                found.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
        waiter = getattr(task, "_fut_waiter", None)  # asyncio keeps no public one
        found.append(repr(waiter)[:200])
        task = waiter
    return found


async def end_calls(connections: Connections, timeout: float) -> None:
    """Take no new connection, cancel every connection's task and wait for them: a call's
    sandbox is killed and its result audited (brokerd.runner) before its task ends. A task
    still running a moment later is cancelled again (a cancellation some wait swallowed must
    not hold brokerd: starting and tearing down a sandbox hold theirs until done,
    sandbox._process). Past ``timeout`` brokerd exits at once (status 1), saying where each
    call waits: the next start audits them."""
    connections.closed = True
    deadline = asyncio.get_running_loop().time() + timeout
    left = set(connections.tasks)
    while left:
        for task in left:
            task.cancel()
        wait = min(RECANCEL_EVERY, deadline - asyncio.get_running_loop().time())
        if wait <= 0:
            break
        _, left = await asyncio.wait(left, timeout=wait)
    if left:
        log.critical("%d call(s) did not end within %g s of the stop; exiting without them "
                     "(the next start audits them), each waiting at: %s", len(left), timeout,
                     "; ".join(" <- ".join(waiting_at(task)) for task in left))
        logging.shutdown()
        os._exit(1)


async def serve(broker: Broker, config: Config, source: str | Path = "config",
                unfinished: Unfinished | None = None) -> None:
    """broker.sock and approve.sock, bound with their modes and groups, until SIGTERM or
    SIGINT; READY=1 once both are bound. ``source`` (the config file) names it in errors.
    ``unfinished`` closes the calls the audit log holds open: a previous life's before
    serving, and, at the stop, those brokerd stopped before it ran them, once every call's
    connection has ended (``end_calls``: within STOP_TIMEOUT)."""
    served = config.served("broker"), config.served("approve")
    groups = [each.gid(source) for each in served]
    notifier = Notifier()
    section_approvers = config.broker.approvers

    connections = Connections()

    async def main() -> None:
        if unfinished is not None:
            await unfinished.close(broker.audit.unfinished, FOUND_AT_START)
        try:
            await listen()
        finally:  # stopping: nothing is accepted any more
            await end_calls(connections, STOP_TIMEOUT)
            if unfinished is not None:
                await unfinished.close(broker.audit.open_calls(), STOPPED_BEFORE_END)
            await broker.audit.flush()

    async def listen() -> None:
        async with contextlib.AsyncExitStack() as stack:
            for each, group, handle in zip(served, groups, handlers(broker), strict=True):
                handler = tracked(handle, connections)
                # approve.sock also admits the uids its local:<uid> approvers name.
                extra = local_uids(section_approvers) if each.name == "approve" else frozenset()
                await stack.enter_async_context(listening(
                    each.path, handler, mode=each.mode, group=group,
                    peers=PeerPolicy(uids=extra, group=group),
                ))
            notifier.ready(f"serving {served[0].path}")
            log.info("serving %s and %s", served[0].path, served[1].path)
            await wait_forever()

    await run_until_signalled(main(), on_stop=notifier.stopping)
    log.info("stopped")
