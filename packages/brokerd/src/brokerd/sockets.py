"""The socket shells: ``broker.sock`` (loopd's tool calls) and ``approve.sock`` (local
``bxctl approve``/``deny``), bound by ``serve``. One connection per request; each frame read takes
its own timeout; what a call does is calls.py's.

On approve.sock the approver is whoever the kernel says is connected (SO_PEERCRED), written as
``local:<uid>``, or ``local:socket(uid <uid>)`` when ``local:socket`` admits any peer
(approvals.local_approver): the ``by`` a client claims is replaced, never trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path

from bxcore import daemon
from bxcore.config import Config
from bxcore.config.broker import LOCAL_SOCKET, LOCAL_UID
from bxcore.daemon import Notifier, listening, run_until_signalled, wait_forever
from bxcore.errors import BoxmakerError, ErrorCode, FrameError, LocalProtocolError
from bxcore.frames import Frame, Kinds, error_frame
from bxcore.framestream import FrameStream, answer_our_bug
from bxcore.peers import PeerPolicy, overflow_uid
from bxcore.protocol import approval as approval_wire
from bxcore.protocol import broker as broker_wire
from bxcore.protocol import delegate as delegate_wire
from bxcore.tools import ToolRequest

from .approvals import local_approver
from .calls import Broker
from .errors import ApprovalError, AuditError, CallReused, TaintError
from .unfinished import FOUND_AT_START, STOPPED_BEFORE_END, Unfinished

log = logging.getLogger("brokerd.sockets")

REQUEST_TIMEOUT = 30.0  # seconds for a client to send its one request frame
# Seconds a stop waits for the running calls to be killed and audited: under systemd's
# default TimeoutStopSec (90 s), so that brokerd, not systemd, decides what happens then.
STOP_TIMEOUT = 60.0
RECANCEL_EVERY = 1.0  # seconds between cancellations of a call that has not ended yet

Handler = Callable[[FrameStream, asyncio.StreamWriter], Awaitable[None]]


def peer_uid(writer: asyncio.StreamWriter) -> int:
    sock: socket.socket = writer.get_extra_info("socket")
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


async def _read_request(stream: FrameStream) -> Frame | None:
    """The one request frame, or None after answering a malformed one."""
    try:
        return await stream.read(REQUEST_TIMEOUT)
    except FrameError as exc:
        with contextlib.suppress(BoxmakerError):
            await stream.write(error_frame(ErrorCode.BAD_FRAME, str(exc)))
        return None
    except BoxmakerError:
        return None


class LoopChildren:
    """A delegate call's child, run by loopd on the call's own connection: ``delegate_run`` out,
    ``delegate_done`` back (no timeout: the child's turn is as long as its rounds; loopd going
    away ends the wait with StreamClosed)."""

    def __init__(self, stream: FrameStream):
        self._stream = stream

    async def run(self, order: delegate_wire.DelegateRun) -> delegate_wire.DelegateDone:
        await self._stream.write(Frame.of(delegate_wire.DELEGATE_RUN, order, final=False))
        frame = await self._stream.read()
        if frame.kind != delegate_wire.DELEGATE_DONE or not frame.final:
            raise FrameError(f"expected a final {delegate_wire.DELEGATE_DONE!r}, got "
                             f"{frame.kind!r}")
        return frame.parse(delegate_wire.DelegateDone)


async def handle_tool_call(broker: Broker, stream: FrameStream) -> None:
    """One request on broker.sock, answered and audited whatever it holds: a frame that cannot
    be decoded or is not a tool request is audited as refused, and a failure inside brokerd is
    answered with an error frame, never a dropped connection."""
    try:
        frame = await stream.read(REQUEST_TIMEOUT)
    except FrameError as exc:
        await broker.refuse(f"the request frame could not be decoded: {exc}")
        with contextlib.suppress(BoxmakerError):
            await stream.write(error_frame(ErrorCode.BAD_FRAME, str(exc)))
        return
    except BoxmakerError:
        return  # no request arrived: the peer closed or said nothing
    try:
        request = frame.parse(ToolRequest)
    except FrameError as exc:
        await broker.refuse(f"not a tool request: {exc}", body=frame.body)
        await stream.write(error_frame(ErrorCode.BAD_REQUEST, str(exc)))
        return

    async def waiting(body: broker_wire.ToolWaiting) -> None:
        await stream.write(Frame.of(broker_wire.TOOL_WAITING, body, final=False))

    try:
        response = await broker.call(request, waiting, LoopChildren(stream))
    except (AuditError, TaintError) as exc:  # brokerd's state cannot be written (a full disk)
        log.error("call %s/%s (%s): %s", request.session, request.call, request.tool, exc)
        await stream.write(error_frame(ErrorCode.UNAVAILABLE, str(exc)))
        return
    except CallReused as exc:
        log.error("call %s/%s (%s): %s", request.session, request.call, request.tool, exc)
        await stream.write(error_frame(ErrorCode.BAD_REQUEST, str(exc)))
        return
    except Exception as exc:  # anything at all: the caller gets an answer, the log has the trace
        log.exception("call %s/%s (%s) failed", request.session, request.call, request.tool)
        await stream.write(error_frame(ErrorCode.INTERNAL, f"brokerd failed the call: "
                                                           f"{type(exc).__name__}"))
        return
    await stream.write(Frame.of(broker_wire.TOOL_RESPONSE, response, final=True))


async def handle_approval(broker: Broker, stream: FrameStream, uid: int, overflow: int) -> None:
    frame = await _read_request(stream)
    if frame is None:
        return
    if frame.kind == approval_wire.APPROVAL_LIST:
        try:  # the pending calls' arguments are for approvers only
            local_approver(uid, broker.desk.book.approvers, overflow)
        except ApprovalError as exc:
            log.warning("approval list for local:%d refused: %s", uid, exc)
            await stream.write(error_frame(exc.code, str(exc)))
            return
        body = approval_wire.ApprovalPending(approvals=broker.desk.pending())
        await stream.write(Frame.of(approval_wire.APPROVAL_PENDING, body, final=True))
        return
    try:
        claimed = frame.parse(approval_wire.ApprovalAnswer)
        by = local_approver(uid, broker.desk.book.approvers, overflow)
        answer = claimed.model_copy(update={"by": by})
        ack = broker.desk.answer(answer)
    except FrameError as exc:
        await stream.write(error_frame(ErrorCode.BAD_REQUEST, str(exc)))
        return
    except ApprovalError as exc:
        log.warning("approval answer from local:%d refused: %s", uid, exc)
        await stream.write(error_frame(exc.code, str(exc)))
        return
    await stream.write(Frame.of(approval_wire.APPROVAL_ACK, ack, final=True))


def connection(path: Path, kinds: Collection[str], handle: Handler, sends: Kinds
               ) -> daemon.Handler:
    """One connection: the frame stream around it, closed whatever the handler does."""

    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer, kinds, sends=sends)
        try:
            await handle(stream, writer)
        except LocalProtocolError as exc:  # ours: logged as a bug, the peer told ``internal``
            await answer_our_bug(stream, exc, log)
        except BoxmakerError as exc:
            log.info("connection on %s ended: %s", path.name, exc)
        finally:
            await stream.close()

    return serve_one


def handlers(broker: Broker, overflow: int | None = None) -> tuple[Handler, Handler]:
    """(broker.sock's, approve.sock's); ``overflow`` defaults to the kernel's overflow uid."""
    overflow = overflow_uid() if overflow is None else overflow
    approvers = broker.desk.book.approvers
    if f"local:{overflow}" in approvers and LOCAL_SOCKET not in approvers:
        log.warning('[broker] approvers lists local:%d, the overflow uid, which names nobody and '
                    'is refused: use "local:socket" and gate approve.sock\'s directory', overflow)

    async def tool_call(stream: FrameStream, _writer: asyncio.StreamWriter) -> None:
        await handle_tool_call(broker, stream)

    async def approval(stream: FrameStream, writer: asyncio.StreamWriter) -> None:
        await handle_approval(broker, stream, peer_uid(writer), overflow)

    return tool_call, approval


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
            tables = ((broker_wire.TO_BROKERD, broker_wire.FROM_BROKERD),
                      (approval_wire.TO_APPROVE_SOCKET, approval_wire.FROM_APPROVE_SOCKET))
            for each, group, (kinds, sends), handle in zip(
                served, groups, tables, handlers(broker), strict=True
            ):
                handler = tracked(connection(each.path, kinds, handle, sends), connections)
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
