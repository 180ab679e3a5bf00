"""One tool call from request to response: decide against the grants in force now, audit the
decision, ask the owner when the grant says ``ask``, run, and answer.

A decision that depended on mount labels (``Decision.consulted``) raises the session's taint to
them as soon as it is audited (its record's ``consulted``), before the session hears anything,
and its answer, a denial too, is labelled with them (docs/decisions/label-dependent-answers.md).

While the call is not finished the caller hears so every ``[broker] waiting_interval`` seconds
(a ToolWaiting, ``approval`` while the owner is asked, ``running`` while it runs); a call that
finishes within one interval sends none, and none is sent after the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TypeVar

from bxcore.canonical import canonical_json
from bxcore.errors import BoxmakerError, SecretError
from bxcore.logs import fields
from bxcore.protocol import approval as approval_wire
from bxcore.protocol.broker import ToolWaiting
from bxcore.secrets import Secret, SecretStore
from bxcore.tools import DataClass, DecisionRecord, ToolRequest, ToolResponse, plain_response
from bxcore.util import sha256, text_sha256

from .approvals import ApprovalDesk
from .audit import AuditLog
from .delegate import Children
from .errors import CallReused, TaintError
from .grantstore import GrantStore, resolve_paths
from .labels import Label
from .policy import CallArguments, Decision, Grant, decide, path_roots, settle
from .runner import Runner, raised_to
from .sandbox import ToolSettings
from .taint import Taint, TaintStore

log = logging.getLogger("brokerd.calls")

T = TypeVar("T")
Notify = Callable[[ToolWaiting], Awaitable[None]]


def _seconds_since(started: float) -> int:
    return int(asyncio.get_running_loop().time() - started)


async def while_running(work: Awaitable[T], interval: float, on_waiting: Notify) -> T:
    """``work``'s result; every ``interval`` seconds until then, ``on_waiting`` hears that it is
    still running. A notice is never sent concurrently with, or after, the result. A notice
    that cannot be delivered (the caller went away) ends the notices, not the work: the call
    still finishes and is audited, as it would without them."""
    task = asyncio.ensure_future(work)
    started = asyncio.get_running_loop().time()
    tell = True
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval if tell else None)
            if done:
                return task.result()
            try:
                await on_waiting(ToolWaiting(reason="running", elapsed=_seconds_since(started)))
            except BoxmakerError as exc:
                log.info("a running call's notice was not delivered: %s", exc)
                tell = False
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def denied(reason: str) -> ToolResponse:
    return plain_response("denied", f"Denied: {reason}")


def _log_decision(record: DecisionRecord) -> None:
    """One line per decided call, with the journal's fields (bxcore.logs): a session's calls
    are ``journalctl -u boxmaker-brokerd BOXMAKER_SESSION=<id>``; the audit log stays the
    record, this is the operator's view of it."""
    log.info("call %s/%d (%s): %s (%s)", record.session, record.call, record.tool,
             record.verdict, record.reason,
             extra=fields(session=record.session, call=record.call, tool=record.tool,
                          verdict=record.verdict, grant=record.grant))


class Broker:
    def __init__(self, *, grants: GrantStore, audit: AuditLog, taints: TaintStore,
                 desk: ApprovalDesk, runner: Runner, secrets: SecretStore,
                 clock: Callable[[], datetime],
                 configured: Mapping[str, ToolSettings] | None = None,
                 floor: DataClass = DataClass.PUBLIC):
        self.grants = grants
        self.audit = audit
        self.taints = taints
        self.desk = desk
        self._runner = runner
        self._secrets = secrets
        self._clock = clock
        self._configured = dict(configured or {})  # tool -> what the config fixes for it
        # Every session starts at this class: what the identity files may hold, which every
        # session's prompt carries ([memory] identity_ceiling; docs/memory.md).
        self.floor = floor

    async def refuse(self, reason: str, body: object = None) -> None:
        """Audit a request refused before any decision (its frame could not be decoded, or is
        not a tool request), with whatever it named that can be read."""
        fields: dict[str, object] = {}
        if isinstance(body, dict):
            for key, kind in (("session", str), ("call", int), ("tool", str)):
                value = body.get(key)
                if isinstance(value, kind) and not isinstance(value, bool) and \
                        not (isinstance(value, int) and value < 0):  # a call is a Count
                    fields[key] = value
            fields["request_sha256"] = sha256(canonical_json(body))
        await self.audit.refused(reason=reason, **fields)

    async def call(self, request: ToolRequest, on_waiting: Notify,
                   children: Children | None = None) -> ToolResponse:
        """Decide, audit, ask, run and label one call; ``children`` is the caller's way of
        running a delegate call's child session (loopd's connection). The arguments are parsed
        here, once: every step after takes the parsed value."""
        if not self.audit.claim(request.session, request.call):
            reason = (f"call {request.call} of session {request.session} was sent before; a "
                      "call number is used once, so this request is refused and nothing ran")
            await self.audit.refused(reason=reason, session=request.session, call=request.call,
                                     tool=request.tool,
                                     request_sha256=sha256(canonical_json(request.model_dump())))
            raise CallReused(reason)
        await self._settled(request)
        taint = self.taints.get(request.session).seen_at_least(self.floor)
        arguments = CallArguments.parse(request.arguments)
        try:
            decision = self._decide(request, arguments, taint)
        except Exception as exc:  # whatever the arguments hold, the request is audited
            log.exception("call %s/%s (%s) could not be checked",
                          request.session, request.call, request.tool,
                          extra=fields(session=request.session, call=request.call,
                                       tool=request.tool))
            record = DecisionRecord(
                session=request.session, call=request.call, tool=request.tool,
                arguments_sha256=text_sha256(request.arguments), verdict="deny", grant=None,
                reason=f"brokerd could not check the request ({type(exc).__name__})",
            )
            await self.audit.decision(decision=record)
            return denied(record.reason)
        record = decision.record
        consulted = decision.consulted
        marks = {} if consulted.plain else {"consulted": {
            "class": consulted.data_class, "untrusted": consulted.untrusted}}
        if record.verdict == "ask":
            assert record.grant is not None
            approval = self.desk.open(request, record.grant)
            await self.audit.decision(decision=record, approval=approval.id, **marks)
            try:
                taint = self._learned(request.session, consulted, taint)
            except TaintError as exc:  # the ask ends here, denied, before anyone is asked
                self.desk.abandon(approval)
                gone = settle(decision, approved=False, reason=str(exc))
                await self.audit.decision(decision=gone.record, approval=approval.id)
                return _owed(exc, consulted)
            asked = asyncio.get_running_loop().time()

            async def pending(approval: approval_wire.ApprovalRequest) -> None:
                await on_waiting(ToolWaiting(approval=approval.id, expires=approval.expires,
                                             elapsed=_seconds_since(asked)))

            try:
                outcome = await self.desk.wait(approval, pending)
            except BaseException:
                # loopd went away (or brokerd is stopping): the call is abandoned, and the
                # audit log says so rather than leaving the ask without an outcome.
                gone = settle(decision, approved=False, reason="the caller went away")
                await self.audit.decision(decision=gone.record, approval=approval.id)
                raise
            approved, reason = outcome.approved, outcome.reason
            if approved:
                again = self._decided_again(request, arguments)
                if again is not None:  # its answer tells of what the second decision read
                    consulted = consulted.join(again.consulted)
                if again is None or not again.decides_as(decision):
                    approved, reason = False, (
                        "what its grant decides changed while the owner was asked (the grants, "
                        "or the labels of what it reaches); nothing ran: ask again")
            decision = settle(decision, approved=approved, reason=reason)
            await self.audit.decision(decision=decision.record, approval=outcome.approval,
                                      by=outcome.by)
        else:
            await self.audit.decision(decision=record, **marks)
        try:  # an ask's second decision may have read more labels than its first
            taint = self._learned(request.session, consulted, taint)
        except TaintError as exc:
            if decision.allowed:  # not run, and closed: an allowed call has one result
                await self._not_run(request, consulted, str(exc))
            return _owed(exc, consulted)
        _log_decision(decision.record)
        if not decision.allowed:
            return raised_to(denied(decision.record.reason), consulted)
        run = self._runner.run(decision, request, arguments=arguments, taint=taint,
                               children=children)
        return raised_to(await while_running(run, self.desk.interval, on_waiting), consulted)

    async def _settled(self, request: ToolRequest) -> None:
        """Write the session's owed taint (a full disk kept it from its file, brokerd.taint)
        before any of its calls runs; while it cannot be, the request is refused (audited)
        and TaintError says why. Once the disk takes it, the call goes on, with no restart."""
        try:
            self.taints.settle(request.session)
        except TaintError as exc:
            await self.audit.refused(reason=str(exc), session=request.session,
                                     call=request.call, tool=request.tool,
                                     request_sha256=sha256(canonical_json(request.model_dump())))
            raise

    async def _not_run(self, request: ToolRequest, label: Label, why: str) -> None:
        """The result of an allowed call that does not run because its session's taint cannot
        be written: failed, labelled ``label`` (so the log still holds what the taint owes).
        Its taint is owed already; the write is not tried again here."""
        await self.audit.result(
            session=request.session, call=request.call, tool=request.tool, status="failed",
            untrusted=label.untrusted, truncated=False,
            content_sha256=sha256(why.encode("utf-8")), reason=why,
            **{"class": label.data_class})

    def _decided_again(self, request: ToolRequest, arguments: CallArguments) -> Decision | None:
        """``request`` decided again once the owner approved it (None if that fails): an
        approval can come long after the owner edited the grant, and the ask runs only if it
        is decided as it was asked, to the last field of its sandbox (attack 31j, E1: hosts
        emptied, a class raised or a secret removed in the meantime were run as asked)."""
        try:
            taint = self.taints.get(request.session).seen_at_least(self.floor)
            return self._decide(request, arguments, taint)
        except Exception:  # not decided again is not granted: the ask still gets its outcome
            log.exception("call %s/%s (%s) could not be decided again after its approval",
                          request.session, request.call, request.tool)
            return None

    def _learned(self, session: str, consulted: Label, taint: Taint) -> Taint:
        """The session's taint once it has heard a decision that depended on ``consulted``
        (mount labels): raised to them, durably, after the decision record that says so."""
        if consulted.plain:
            return taint
        return self.taints.record(session, consulted.data_class, consulted.untrusted) \
            .seen_at_least(self.floor)

    def _decide(self, request: ToolRequest, arguments: CallArguments, taint: Taint) -> Decision:
        grants = self.grants.current()
        resolved, read = resolve_paths(arguments.value or {}, path_roots(request.tool, grants))
        return decide(
            request, grants, arguments=arguments, now=self._clock(), taint=taint,
            resolved_paths=resolved, lookups=read,
            secrets=self._secrets_for(request.tool, grants), configured=self._configured,
            labels=self._runner.mount_labels(),
        )

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


def _owed(exc: TaintError, consulted: Label) -> ToolResponse:
    """The answer to a call whose session could not be raised to the labels its decision
    consulted (a full disk): whether this happened depends on them, so it is labelled with them
    (the attack 31h, B6: an error frame carries no label, and the caller's view of the session's
    taint stayed public)."""
    return raised_to(plain_response("failed", f"Nothing ran: {exc}"), consulted)
