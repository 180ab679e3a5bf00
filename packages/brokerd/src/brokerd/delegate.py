"""Running an allowed ``delegate`` call: a child session that loopd runs, labelled by brokerd.

loopd is the only role that talks to the model, so loopd runs the child's turn; brokerd decides
the call, starts the child with the parent's taint, and labels the answer (bxcore.protocol.
delegate). The child inherits the parent's taint before its first call, written to the audit log
as result records of the child's session numbered ``INHERITED`` (0: the child's own calls number
from 1, so no call of its has a second result; the fourth attack on issue 31 found the parent's
call number used there), so ``brokerd taint rebuild`` gives the same file: a
session cannot shed its taint by handing its work to a fresh one. Every call the child makes is
decided by brokerd against that taint, so the child's taint file is brokerd's own record of what
it saw; the answer carries its highest class and its untrusted flag, and the parent's taint rises
by them when the runner records the result. A subagent cannot delegate in turn.
"""

from __future__ import annotations

import logging
from typing import Protocol

from bxcore.errors import BoxmakerError
from bxcore.ids import new_session_id
from bxcore.protocol.delegate import (
    DELEGATE,
    SUBAGENT_PREFIX,
    DelegateArgs,
    DelegateDone,
    DelegateRun,
)
from bxcore.tools import DataClass, ToolRequest, ToolResponse, plain_response
from bxcore.util import sha256
from pydantic import ValidationError

from .audit import AuditLog
from .policy import NOT_AN_OBJECT, CallArguments
from .taint import Taint, TaintStore

log = logging.getLogger("brokerd.delegate")

INHERITED = 0  # the call number of a child's inherited taint: no call of the child has it


class Children(Protocol):
    """The caller's side of one call's connection: loopd runs the child there."""

    async def run(self, order: DelegateRun) -> DelegateDone:
        """The child's answer. Raises BoxmakerError when loopd cannot run it or went away."""
        ...


def child_session() -> str:
    return SUBAGENT_PREFIX + new_session_id()


def order_for(request: ToolRequest, arguments: CallArguments, child: str) -> DelegateRun | str:
    """The order for loopd, or why the call cannot run (pure; ``arguments`` already parsed)."""
    if request.session.startswith(SUBAGENT_PREFIX):
        return "Not run: a subagent cannot delegate."
    if arguments.value is None:
        return f"Not run: {NOT_AN_OBJECT}"
    try:
        task = DelegateArgs.model_validate(arguments.value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        return f"Not run: delegate's {where}: {first['msg']}"
    return DelegateRun(session=child, task=task.task, rounds=task.rounds)


def label(done: DelegateDone, child: Taint) -> ToolResponse:
    """The parent's result: the child's answer with the child's taint (pure)."""
    return ToolResponse.model_validate({
        "status": done.status, "content": done.content,
        "class": child.highest or DataClass.PUBLIC, "untrusted": child.untrusted,
        "truncated": False,
    })


async def run_delegate(request: ToolRequest, arguments: CallArguments, parent: Taint, *,
                       children: Children | None, audit: AuditLog, taints: TaintStore
                       ) -> ToolResponse:
    """Start the child with ``parent``'s taint, have loopd run it, label its answer."""
    order = order_for(request, arguments, child_session())
    if isinstance(order, str):
        return plain_response("failed", order)
    if children is None:
        return plain_response("failed", "Not run: this caller cannot run a subagent.")
    digest = sha256(order.task.encode("utf-8"))
    for data_class in sorted(parent.classes):  # the child starts where the parent is
        await audit.result(session=order.session, call=INHERITED, tool=DELEGATE, status="ok",
                     untrusted=parent.untrusted, truncated=False, content_sha256=digest,
                     **{"class": data_class})
        taints.record(order.session, data_class, parent.untrusted)
    log.info("call %s/%s: subagent %s started", request.session, request.call, order.session)
    try:
        done = await children.run(order)
    except BoxmakerError as exc:
        log.warning("subagent %s of %s did not finish: %s", order.session, request.session, exc)
        done = DelegateDone(status="failed", content=f"The subagent did not finish: {exc}")
    return label(done, taints.get(order.session))
