"""The runner: takes a Decision, runs it (a sandbox backend, or memoryd for memory tools), caps
and labels the result, audits it, and adds its label to the session's taint.

A backend is anything with ``async run(decision) -> ToolOutput``; it takes the spec out of the
Decision with ``authorize()``. The runner checks the Decision first, so a forged, used or
refusing one never reaches a backend.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from bxcore.errors import BoxmakerError
from bxcore.protocol.memory import MEMORY_TOOLS
from bxcore.tools import DataClass, ToolRequest, ToolResponse
from bxcore.util import sha256

from .audit import AuditLog
from .policy import Decision
from .taint import Taint, TaintStore

log = logging.getLogger("brokerd.runner")

TRUNCATED = "\n[truncated]"


class ToolOutput(Protocol):
    """What a backend gives back for one run (the toolkit program's one JSON result)."""

    @property
    def content(self) -> str: ...
    @property
    def data_class(self) -> DataClass: ...
    @property
    def untrusted(self) -> bool: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def failed(self) -> bool: ...


class SandboxBackend(Protocol):
    async def run(self, decision: Decision) -> ToolOutput: ...


class MemoryPort(Protocol):
    async def call(self, decision: Decision, request: ToolRequest, taint: Taint) -> ToolResponse:
        ...


@dataclass(frozen=True)
class Failure:
    """A run that did not complete, in the backend's ToolOutput shape."""

    content: str
    data_class: DataClass
    untrusted: bool = False
    truncated: bool = False
    failed: bool = True


def cap(content: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` bytes of UTF-8, cut at a character boundary, marked when cut."""
    data = content.encode("utf-8")
    if len(data) <= limit:
        return content, False
    room = max(0, limit - len(TRUNCATED.encode("utf-8")))
    return data[:room].decode("utf-8", errors="ignore") + TRUNCATED, True


class Runner:
    def __init__(self, *, backend: SandboxBackend, memory: MemoryPort, audit: AuditLog,
                 taints: TaintStore, result_cap: int):
        self._backend = backend
        self._memory = memory
        self._audit = audit
        self._taints = taints
        self._cap = result_cap

    async def run(self, decision: Decision, request: ToolRequest, *, taint: Taint,
                  label: DataClass) -> ToolResponse:
        """Run an allowing Decision for ``request``. ``label`` is the least class its result
        gets (the grant's ``result_class``). Raises NotAuthorized for a forged, used or refusing
        Decision, before anything runs."""
        decision.verify()
        if decision.record.call != request.call or decision.record.session != request.session:
            raise BoxmakerError("the Decision was made for another call")
        if request.tool in MEMORY_TOOLS:
            answer = await self._memory.call(decision, request, taint)
            return self._finish(request, answer.status, answer.content, answer.data_class,
                                answer.untrusted, answer.truncated)
        try:
            output: ToolOutput = await self._backend.run(decision)
        except BoxmakerError as exc:
            log.warning("call %s/%s (%s) failed to run: %s",
                        request.session, request.call, request.tool, exc)
            output = Failure(f"The tool could not run: {exc}", label)
        return self._finish(request, "failed" if output.failed else "ok", output.content,
                            max(output.data_class, label), output.untrusted, output.truncated)

    def _finish(self, request: ToolRequest, status: str, content: str, data_class: DataClass,
                untrusted: bool, truncated: bool) -> ToolResponse:
        content, cut = cap(content, self._cap)
        response = ToolResponse.model_validate({
            "status": status, "content": content, "class": data_class,
            "untrusted": untrusted, "truncated": truncated or cut,
        })
        self._audit.result(
            session=request.session, call=request.call, tool=request.tool,
            status=response.status, untrusted=response.untrusted, truncated=response.truncated,
            content_sha256=sha256(response.content.encode("utf-8")),
            **{"class": response.data_class},
        )
        self._taints.record(request.session, response.data_class, response.untrusted)
        return response
