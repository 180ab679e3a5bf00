"""The runner: takes a Decision, runs it (a sandbox backend, memoryd for memory tools, or
brokerd's own clock for ``clock``), caps and labels the result, audits it, and adds its label to
the session's taint.

A backend is a ``brokerd.sandbox.Sandbox`` (``async run(decision) -> ToolOutput | ToolFailure``);
it takes the spec out of the Decision with ``authorize()``. The runner checks the Decision
first, so a forged, used or refusing one never reaches a backend. The result's label is the
grant's (the spec carries it), or memoryd's for memory tools.

``consult`` sends a payload off the owner's hosts: its payload goes to the egress log
(``brokerd.egresslog``) before it runs, and it does not run when that record cannot be
written or consult is not configured. Its answer is labelled at least the session's highest
class, since whatever was attached came from the session.

``delegate`` runs a child session through the caller (``brokerd.delegate``); its answer is
labelled with the child's taint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from bxcore.errors import BoxmakerError
from bxcore.protocol.delegate import DELEGATE
from bxcore.protocol.memory import MEMORY_TOOLS
from bxcore.tools import CLOCK, DataClass, ToolRequest, ToolResponse, cap_text, plain_response
from bxcore.util import format_rfc3339, sha256

from .audit import AuditLog
from .delegate import Children, run_delegate
from .egresslog import CONSULT, ConsultEgress
from .errors import EgressLogError, ProvenanceError
from .grantstore import real_path
from .policy import CallArguments, Decision
from .provenance import Mark, ProvenanceStore
from .sandbox import Sandbox
from .taint import Taint, TaintStore

log = logging.getLogger("brokerd.runner")



class MemoryPort(Protocol):
    async def call(self, decision: Decision, request: ToolRequest, taint: Taint) -> ToolResponse:
        ...


def _path_argument(arguments: CallArguments) -> str | None:
    """The call's ``path`` argument resolved on the host, or None when it has none usable."""
    value = arguments.get("path")
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        return None
    try:
        return real_path(value)
    except ValueError:
        return None


def not_run(why: str) -> ToolResponse:
    return plain_response("failed", why)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Runner:
    def __init__(self, *, backend: Sandbox, memory: MemoryPort, audit: AuditLog,
                 taints: TaintStore, result_cap: int, consult: ConsultEgress | None = None,
                 provenance: ProvenanceStore | None = None,
                 clock: Callable[[], datetime] = _utc_now):
        self._backend = backend
        self._provenance = provenance
        self._consult = consult
        self._memory = memory
        self._audit = audit
        self._taints = taints
        self._cap = result_cap
        self._clock = clock

    async def run(self, decision: Decision, request: ToolRequest, *, arguments: CallArguments,
                  taint: Taint, children: Children | None = None) -> ToolResponse:
        """Run an allowing Decision for ``request`` (``arguments``: its arguments, parsed once
        by the caller). Raises NotAuthorized for a forged, used or refusing Decision, before
        anything runs. ``children`` runs a delegate call's child."""
        decision.verify()
        if decision.record.call != request.call or decision.record.session != request.session:
            raise BoxmakerError("the Decision was made for another call")
        if request.tool in MEMORY_TOOLS:
            answer = await self._memory.call(decision, request, taint)
        elif request.tool == CLOCK.name:
            decision.authorize()
            answer = plain_response("ok", format_rfc3339(self._clock()))
        elif request.tool == DELEGATE:
            answer = await run_delegate(request, arguments, taint, children=children,
                                        audit=self._audit,
                                        taints=self._taints)
        elif request.tool == CONSULT:
            answer = await self._run_consult(decision, request, arguments, taint)
        elif self._provenance is None:
            answer = await self._run_sandboxed(decision, request)
        else:
            answer = await self._run_tracked(decision, request, arguments, taint,
                                             self._provenance)
        return await self._finish(request, answer)

    async def _run_tracked(self, decision: Decision, request: ToolRequest,
                           arguments: CallArguments, taint: Taint, provenance: ProvenanceStore
                           ) -> ToolResponse:
        """Run a sandboxed call; its result carries the marks of what it can read, and what it
        wrote is marked with what the session had seen (brokerd.provenance)."""
        mounts = decision.mounts
        seen = provenance.seen_by(request.tool, _path_argument(arguments),
                                  [m.source for m in mounts])
        started = time.time_ns()
        answer = await self._run_sandboxed(decision, request)
        if seen is not None:
            answer = answer.model_copy(update={
                "data_class": max(answer.data_class, seen.data_class),
                "untrusted": answer.untrusted or seen.untrusted})
        writable = [m.source for m in mounts if m.writable]
        if writable:
            mark = Mark(taint.highest or DataClass.PUBLIC, taint.untrusted or answer.untrusted)
            try:
                provenance.record(writable, started, mark, session=request.session,
                                  call=request.call)
            except ProvenanceError as exc:
                log.error("call %s/%s: what it wrote is not marked: %s",
                          request.session, request.call, exc)
                answer = answer.model_copy(update={"untrusted": True})
        return answer

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
        try:
            self._consult.record(request, arguments, decision.record.grant)
        except EgressLogError as exc:
            log.error("consult call %s/%s not sent: %s", request.session, request.call, exc)
            return not_run(f"Nothing was sent: the egress log cannot be written: {exc}")
        answer = await self._run_sandboxed(decision, request)
        floor = taint.highest
        if floor is not None and floor > answer.data_class:
            answer = answer.model_copy(update={"data_class": floor})
        return answer

    async def _finish(self, request: ToolRequest, answer: ToolResponse) -> ToolResponse:
        content, cut = cap_text(answer.content, self._cap)
        response = answer.model_copy(update={"content": content,
                                             "truncated": answer.truncated or cut})
        await self._audit.result(
            session=request.session, call=request.call, tool=request.tool,
            status=response.status, untrusted=response.untrusted, truncated=response.truncated,
            content_sha256=sha256(response.content.encode("utf-8")),
            **{"class": response.data_class},
        )
        self._taints.record(request.session, response.data_class, response.untrusted)
        return response
