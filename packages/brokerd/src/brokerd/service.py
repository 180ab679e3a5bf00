"""One tool call from request to response: decide against the grants in force now, audit the
decision, ask the owner when the grant says ``ask``, run, and answer."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from bxcore.errors import SecretError
from bxcore.secrets import Secret, SecretStore
from bxcore.tools import DataClass, ToolRequest, ToolResponse

from .approvals import ApprovalDesk, Waiting
from .audit import AuditLog
from .grantstore import GrantStore, resolve_paths
from .policy import Grant, decide, parse_arguments, path_arguments, settle
from .runner import Runner
from .sandbox import ToolSettings
from .taint import TaintStore

log = logging.getLogger("brokerd.service")


def denied(reason: str) -> ToolResponse:
    return ToolResponse.model_validate({
        "status": "denied", "content": f"Denied: {reason}", "class": DataClass.PUBLIC,
        "untrusted": False, "truncated": False,
    })


class Broker:
    def __init__(self, *, grants: GrantStore, audit: AuditLog, taints: TaintStore,
                 desk: ApprovalDesk, runner: Runner, secrets: SecretStore,
                 clock: Callable[[], datetime],
                 configured: Mapping[str, ToolSettings] | None = None):
        self.grants = grants
        self.audit = audit
        self.taints = taints
        self.desk = desk
        self._runner = runner
        self._secrets = secrets
        self._clock = clock
        self._configured = dict(configured or {})  # tool -> what the config fixes for it

    async def call(self, request: ToolRequest, on_waiting: Waiting) -> ToolResponse:
        grants = self.grants.current()
        taint = self.taints.get(request.session)
        arguments = parse_arguments(request.arguments) or {}
        decision = decide(
            request, grants, now=self._clock(), taint=taint,
            resolved_paths=resolve_paths(arguments, path_arguments(request.tool, grants)),
            secrets=self._secrets_for(request.tool, grants), configured=self._configured,
        )
        record = decision.record
        if record.verdict == "ask":
            assert record.grant is not None
            approval = self.desk.open(request, record.grant)
            self.audit.decision(decision=record, approval=approval.id)
            try:
                outcome = await self.desk.wait(approval, on_waiting)
            except BaseException:
                # loopd went away (or brokerd is stopping): the call is abandoned, and the
                # audit log says so rather than leaving the ask without an outcome.
                gone = settle(decision, approved=False, reason="the caller went away")
                self.audit.decision(decision=gone.record, approval=approval.id)
                raise
            decision = settle(decision, approved=outcome.approved, reason=outcome.reason)
            self.audit.decision(decision=decision.record, approval=outcome.approval, by=outcome.by)
        else:
            self.audit.decision(decision=record)
        if not decision.allowed:
            return denied(decision.record.reason)
        return await self._runner.run(decision, request, taint=taint)

    def _secrets_for(self, tool: str, grants: tuple[Grant, ...]) -> dict[str, Secret]:
        """The secrets grants for ``tool`` inject; one that cannot be read is left out, so a
        grant that needs it does not match."""
        found = {}
        for name in sorted({n for g in grants if g.applies_to(tool) for n in g.secrets}):
            try:
                found[name] = self._secrets.get(name)
            except SecretError as exc:
                log.error("a grant for %s needs a secret that cannot be read: %s", tool, exc)
        return found
