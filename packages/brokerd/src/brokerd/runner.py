"""The runner: takes a Decision, runs it (a sandbox backend, or memoryd for memory tools), caps
and labels the result, audits it, and adds its label to the session's taint.

A backend is a ``brokerd.sandbox.Sandbox`` (``async run(decision) -> ToolOutput | ToolFailure``);
it takes the spec out of the Decision with ``authorize()``. The runner checks the Decision
first, so a forged, used or refusing one never reaches a backend. The result's label is the
grant's (the spec carries it), or memoryd's for memory tools.
"""

from __future__ import annotations

import logging
from typing import Protocol

from bxcore.errors import BoxmakerError
from bxcore.protocol.memory import MEMORY_TOOLS
from bxcore.tools import DataClass, ToolRequest, ToolResponse
from bxcore.util import sha256

from .audit import AuditLog
from .policy import Decision
from .sandbox import Sandbox
from .taint import Taint, TaintStore

log = logging.getLogger("brokerd.runner")

TRUNCATED = "\n[truncated]"


class MemoryPort(Protocol):
    async def call(self, decision: Decision, request: ToolRequest, taint: Taint) -> ToolResponse:
        ...


def cap(content: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` bytes of UTF-8, cut at a character boundary, marked when cut."""
    data = content.encode("utf-8")
    if len(data) <= limit:
        return content, False
    room = max(0, limit - len(TRUNCATED.encode("utf-8")))
    return data[:room].decode("utf-8", errors="ignore") + TRUNCATED, True


class Runner:
    def __init__(self, *, backend: Sandbox, memory: MemoryPort, audit: AuditLog,
                 taints: TaintStore, result_cap: int):
        self._backend = backend
        self._memory = memory
        self._audit = audit
        self._taints = taints
        self._cap = result_cap

    async def run(self, decision: Decision, request: ToolRequest, *, taint: Taint
                  ) -> ToolResponse:
        """Run an allowing Decision for ``request``. Raises NotAuthorized for a forged, used or
        refusing Decision, before anything runs."""
        decision.verify()
        if decision.record.call != request.call or decision.record.session != request.session:
            raise BoxmakerError("the Decision was made for another call")
        if request.tool in MEMORY_TOOLS:
            answer = await self._memory.call(decision, request, taint)
        else:
            try:
                answer = (await self._backend.run(decision)).as_response()
            except BoxmakerError as exc:
                log.warning("call %s/%s (%s) could not run: %s",
                            request.session, request.call, request.tool, exc)
                answer = ToolResponse.model_validate({
                    "status": "failed", "content": f"The tool could not run: {exc}",
                    "class": DataClass.PUBLIC, "untrusted": False, "truncated": False})
        return self._finish(request, answer)

    def _finish(self, request: ToolRequest, answer: ToolResponse) -> ToolResponse:
        content, cut = cap(answer.content, self._cap)
        response = answer.model_copy(update={"content": content,
                                             "truncated": answer.truncated or cut})
        self._audit.result(
            session=request.session, call=request.call, tool=request.tool,
            status=response.status, untrusted=response.untrusted, truncated=response.truncated,
            content_sha256=sha256(response.content.encode("utf-8")),
            **{"class": response.data_class},
        )
        self._taints.record(request.session, response.data_class, response.untrusted)
        return response
