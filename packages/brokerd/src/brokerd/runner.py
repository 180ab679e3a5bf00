"""The runner: takes a Decision, runs it (a sandbox backend, memoryd for memory tools, or
brokerd's own clock for ``clock``), caps and labels the result, audits it, and adds its label to
the session's taint.

A backend is a ``brokerd.sandbox.Sandbox`` (``async run(decision) -> ToolOutput | ToolFailure``);
it takes the spec out of the Decision with ``authorize()``. The runner checks the Decision
first, so a forged, used or refusing one never reaches a backend. The result's label is the
grant's (the spec carries it), or memoryd's for memory tools.

``consult`` sends a payload off the owner's hosts: its payload goes to the egress log
(``brokerd.egresslog``) before it runs, and it does not run when that record cannot be
written, would leave the state filesystem below the audit log's reserves, or consult is not
configured. Its answer is labelled at least the session's highest
class, since whatever was attached came from the session.

``delegate`` runs a child session through the caller (``brokerd.delegate``); its answer is
labelled with the child's taint.

Every sandboxed call is bracketed by the mount labels (brokerd.labels): before it starts, what
it can write is raised (durably) to its session's taint, its grant's result label and the labels
of everything it can read; when it ends, its result is raised to the labels of everything it
could read. A call whose raises cannot be written does not run. A call refused because of the
calls running beside it (``FlowRefused``) gets an answer labelled with what reached them:
whether it is refused depends on it (docs/decisions/label-dependent-answers.md).

Every allowed call that reaches the runner ends in an audited result and a taint update,
whatever goes wrong on the way: an unexpected exception is logged as brokerd's own bug and the
call's result is "failed"; a call cancelled because brokerd is stopping is "failed" too, labelled
with all it may have seen (``stopped``), and the cancellation goes on once it is audited. A call
brokerd never got to run, or one a SIGKILL cut off, is closed by the audit log's open calls
(brokerd.audit.opencalls).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from bxcore.errors import BoxmakerError
from bxcore.protocol.delegate import DELEGATE
from bxcore.protocol.memory import MEMORY_TOOLS
from bxcore.tools import (
    CLOCK,
    DataClass,
    ToolRequest,
    ToolResponse,
    cap_text,
    plain_response,
    valid_unicode,
)
from bxcore.util import format_rfc3339, sha256

from .audit import AuditLog
from .delegate import Children, run_delegate
from .egresslog import CONSULT, ConsultEgress
from .errors import AuditError, EgressLogError, FlowRefused, LabelError, TaintError
from .labels import Label, Reach, seen
from .labelstore import LabelStore
from .policy import CallArguments, Decision
from .sandbox import Sandbox
from .taint import Taint, TaintStore

log = logging.getLogger("brokerd.runner")


class MemoryPort(Protocol):
    async def call(self, decision: Decision, request: ToolRequest, taint: Taint) -> ToolResponse:
        ...


STOPPED_WHILE_RUNNING = "brokerd stopped while the call ran; what it did before is unknown"


def not_run(why: str) -> ToolResponse:
    return plain_response("failed", why)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def reach_of(decision: Decision, taint: Taint) -> Reach:
    """What the call's sandbox reaches, what its session has seen, the label its grant gives
    its results, and its ceiling when it reaches the network."""
    return Reach(mounts=frozenset(str(m.source) for m in decision.mounts),
                 writes=frozenset(str(m.source) for m in decision.mounts if m.writable),
                 taint=Label(taint.highest or DataClass.PUBLIC, taint.untrusted),
                 emits=Label(*decision.result_label), ceiling=decision.ceiling)


def raised_to(answer: ToolResponse, label: Label) -> ToolResponse:
    return answer.model_copy(update={"data_class": max(answer.data_class, label.data_class),
                                     "untrusted": answer.untrusted or label.untrusted})


class Runner:
    def __init__(self, *, backend: Sandbox, memory: MemoryPort, audit: AuditLog,
                 taints: TaintStore, labels: LabelStore, result_cap: int,
                 consult: ConsultEgress | None = None,
                 clock: Callable[[], datetime] = _utc_now):
        self._backend = backend
        self._labels = labels
        self._consult = consult
        self._memory = memory
        self._audit = audit
        self._taints = taints
        self._cap = result_cap
        self._clock = clock

    def mount_labels(self) -> dict[str, Label]:
        """The mount labels now, for policy: a grant with egress must allow what its mounts
        hold."""
        return self._labels.labels()

    async def run(self, decision: Decision, request: ToolRequest, *, arguments: CallArguments,
                  taint: Taint, children: Children | None = None) -> ToolResponse:
        """Run an allowing Decision for ``request`` (``arguments``: its arguments, parsed once
        by the caller). Raises NotAuthorized for a forged, used or refusing Decision, before
        anything runs. ``children`` runs a delegate call's child."""
        decision.verify()
        if decision.record.call != request.call or decision.record.session != request.session:
            raise BoxmakerError("the Decision was made for another call")
        try:
            answer = await self._dispatch(decision, request, arguments, taint, children)
        except TaintError as exc:  # a full disk (a delegate's child taint): not a bug
            log.error("call %s/%s (%s): %s", request.session, request.call, request.tool, exc)
            answer = not_run(f"The call could not go on: {exc}")
        except Exception as exc:  # whatever broke, the allowed call gets its audited result
            log.exception("call %s/%s (%s) failed inside brokerd: a bug in brokerd",
                          request.session, request.call, request.tool)
            answer = self.stopped(decision, f"brokerd failed while running the call "
                                  f"({type(exc).__name__}); this is a bug in brokerd, and its "
                                  "log has the details")
        except BaseException:  # brokerd is stopping (CancelledError): audited all the same
            await self._finish(request, self.stopped(decision, STOPPED_WHILE_RUNNING),
                               reason=STOPPED_WHILE_RUNNING)
            raise
        return await self._finish(request, answer)

    def stopped(self, decision: Decision, why: str) -> ToolResponse:
        """The result of a call brokerd stopped, or failed in, before it ended: failed, and
        labelled with all it may have seen, since whether and why it failed can depend on what
        it read: its grant's result label joined with the labels of everything it mounts."""
        mounts = (str(m.source) for m in decision.mounts)
        label = Label(*decision.result_label).join(seen(self._labels.labels(), mounts))
        return raised_to(not_run(why), label)

    async def _dispatch(self, decision: Decision, request: ToolRequest,
                        arguments: CallArguments, taint: Taint,
                        children: Children | None) -> ToolResponse:
        if request.tool in MEMORY_TOOLS:
            return await self._memory.call(decision, request, taint)
        if request.tool == CLOCK.name:
            decision.authorize()
            return plain_response("ok", format_rfc3339(self._clock()))
        if request.tool == DELEGATE:
            return await run_delegate(request, arguments, taint, children=children,
                                      audit=self._audit, taints=self._taints)
        if request.tool == CONSULT:
            return await self._run_consult(decision, request, arguments, taint)
        return await self._run_labelled(decision, request, taint)

    async def _run_labelled(self, decision: Decision, request: ToolRequest,
                            taint: Taint) -> ToolResponse:
        """Run a sandboxed call inside its labels (brokerd.labels): what it can write is raised
        before it starts, and its result is raised to what it could read when it ends."""
        try:
            running = self._labels.start(reach_of(decision, taint), session=request.session,
                                         call=request.call)
        except FlowRefused as exc:  # its answer tells of the calls beside it: labelled so
            log.info("call %s/%s not run: %s", request.session, request.call, exc)
            return raised_to(not_run(f"Nothing ran: {exc}"), exc.consulted)
        except LabelError as exc:
            log.error("call %s/%s not run: %s", request.session, request.call, exc)
            return raised_to(not_run("Nothing ran: brokerd cannot write its mount labels (its "
                                     "log says why)"), exc.consulted)
        try:
            answer = await self._run_sandboxed(decision, request)
        finally:
            read = self._labels.finish(running)
        # A failure is labelled as its output would be: the tool can fail on purpose.
        return raised_to(answer, read.join(Label(*decision.result_label)))

    async def _run_sandboxed(self, decision: Decision, request: ToolRequest) -> ToolResponse:
        try:
            self._audit.check_room(m.source for m in decision.mounts if m.writable)
            return (await self._backend.run(decision)).as_response()
        except BoxmakerError as exc:
            log.warning("call %s/%s (%s) could not run: %s",
                        request.session, request.call, request.tool, exc)
            return not_run(f"The tool could not run: {exc}")

    async def _run_consult(self, decision: Decision, request: ToolRequest,
                           arguments: CallArguments, taint: Taint) -> ToolResponse:
        if self._consult is None:
            return not_run("consult is not configured: brokerd's config has no [consult]")
        try:  # the record goes to the state filesystem: inside the audit log's reserve
            self._audit.check_room([self._consult.where()], needed=len(request.arguments),
                                   what="its payload would be written to the egress log, on "
                                        "the filesystem that holds brokerd's audit log")
        except AuditError as exc:
            log.error("consult call %s/%s not sent: %s", request.session, request.call, exc)
            return not_run(f"Nothing was sent: {exc}")
        try:
            self._consult.record(request, arguments, decision.record.grant)
        except EgressLogError as exc:
            log.error("consult call %s/%s not sent: %s", request.session, request.call, exc)
            return not_run(f"Nothing was sent: the egress log cannot be written: {exc}")
        answer = await self._run_labelled(decision, request, taint)
        floor = taint.highest
        if floor is not None and floor > answer.data_class:
            answer = answer.model_copy(update={"data_class": floor})
        return answer

    async def _finish(self, request: ToolRequest, answer: ToolResponse,
                      reason: str | None = None) -> ToolResponse:
        # A tool's answer may hold what is not Unicode (a file name that is not UTF-8): shown
        # escaped, so the answer can be measured, audited and sent (issue 31, class 4).
        content, cut = cap_text(valid_unicode(answer.content), self._cap)
        # "denied" is policy's word, and policy allowed this call: a refusal by what ran it
        # (memoryd's own rules for identity edits) is a call that did not complete.
        status = "failed" if answer.status == "denied" else answer.status
        response = answer.model_copy(update={"content": content, "status": status,
                                             "truncated": answer.truncated or cut})
        try:
            await self._audit.result(
                session=request.session, call=request.call, tool=request.tool,
                status=response.status, untrusted=response.untrusted,
                truncated=response.truncated,
                content_sha256=sha256(response.content.encode("utf-8")), reason=reason,
                **{"class": response.data_class},
            )
        finally:  # a result the log could not take still raises the session's taint
            self._taints.record(request.session, response.data_class, response.untrusted)
        return response
