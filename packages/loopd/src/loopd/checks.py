"""The startup checks as named reports: the inference self-test (docs/design.md, and
the ``slot_switch`` check of the server's prompt-cache settings) and the baseline budget
("Baseline budget"). ``loopd serve`` runs both before it binds loop.sock; ``loopd
selftest`` and ``loopd budget`` run one each, for ``bxctl doctor``. Each report's last line says
how it ended, so a caller that shows one line shows the verdict.

The budget counts the baseline a new session would get now: system.md, the identity (memoryd's
snapshot, asked for under a probe session of its own, so no real session's frozen snapshot is
touched), and the core tool schemas. At start-up memoryd may not be up yet (it is a separate
role); the budget is then counted without the identity and says so, and sessions are refused
until memoryd answers. ``loopd budget`` instead fails without it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from .baseline import Identity
from .budget import BaselineBudget
from .epochs import Baselines
from .errors import BaselineOverBudget, BudgetUncounted, CorruptSession, MemoryUnavailable
from .inference.budget import BudgetReport, ServerTokens
from .inference.client import InferenceClient
from .inference.errors import InferenceError
from .inference.passed import PassedProbes
from .inference.selftest import SelfTestReport, self_test
from .inference.serving import ServingSettings, changes, fetch_serving
from .inference.slot_switch import slot_switch_once
from .memory import MemoryLink
from .store import SessionStore


@dataclass(frozen=True, kw_only=True)
class Report:
    ok: bool
    lines: tuple[str, ...]

    def text(self) -> str:
        return "\n".join(self.lines)


async def selftest_report(client: InferenceClient, passed: PassedProbes | None = None
                          ) -> Report:
    """The self-test's checks, then ``slot_switch`` (the server keeps a session that leaves its
    slot: inference/slot_switch.py). With ``passed`` (``loopd serve``), the generating ones run
    once per server, model, template and flags (``self_test``, ``slot_switch_once``)."""
    tested = await self_test(client, passed)
    report = SelfTestReport(checks=(*tested.checks, await slot_switch_once(client, passed)))
    failed = [check.name for check in report.failures]
    verdict = (f"self-test: ok, {len(report.checks)} checks passed" if report.ok
               else f"self-test: FAILED: {', '.join(failed)}")
    return Report(ok=report.ok, lines=(report.describe(), verdict))


async def budget_report(
    client: InferenceClient, baselines: Baselines, *, identity_required: bool
) -> Report:
    """The budget of the baseline a new session would get now, fitted as a session's is
    (budget.py): identity files the model wrote that would put it over are withheld and named,
    and pass; only what the owner wrote (system.md, soul.md) or the tools can fail it."""
    probe = f"budget-probe-{secrets.token_hex(4)}"
    source = "memoryd" if isinstance(baselines.memory, MemoryLink) else "[baseline] identity"
    note = f"with the identity from {source}"
    try:
        identity = await baselines.memory.identity(probe, 0)
    except MemoryUnavailable as exc:
        if identity_required:
            return Report(ok=False, lines=(f"FAIL baseline_budget: no identity: {exc}",))
        identity = Identity()
        note = f"WITHOUT the identity ({exc})"
    limit = client.section.baseline_budget
    budget = BaselineBudget(counter=ServerTokens(client), limit=limit)
    try:
        fitted = await budget.fit(lambda i: baselines.assemble(i, None), identity,
                                  what="a new session")
    except BudgetUncounted as exc:
        return Report(ok=False, lines=(f"FAIL baseline_budget: cannot count the baseline's "
                                       f"tokens: {exc}",))
    except BaselineOverBudget as exc:  # what each part costs, as a session refused is told
        return Report(ok=False, lines=(f"FAIL baseline_budget: baseline: OVER the budget of "
                                       f"{limit}, {note}", f"     {exc}"))
    lines = [f"ok   baseline_budget: {BudgetReport(tokens=fitted.tokens, budget=limit).describe()}"
             f", {note}"]
    if fitted.withheld:
        lines.append(f"     withheld, as the model wrote them over the budget (each session "
                     f"shows a notice instead): {'; '.join(fitted.withheld)}")
    return Report(ok=True, lines=tuple(lines))


SINCE = "serving_since_session"


def serving_since_report(now: ServingSettings, store: SessionStore) -> Report:
    """``serving_since_session``: the serving settings now against those the latest session
    (or epoch) began under, each change named (serving record, docs/design.md). Not ok on one, so
    ``bxctl doctor`` shows it; ``loopd serve`` reports it and starts anyway (a changed setting
    costs the sessions their cache, which they survive). It passes again once a session has
    begun under the new settings."""
    served = (f"template {now.chat_template_sha256}, KV cache {now.kv_cache_type or 'unknown'}, "
              f"speculative {now.speculative}, {now.slot_count} slots of "
              f"{now.per_slot_context} tokens")
    try:
        latest = store.latest_serving()
    except CorruptSession as exc:
        return Report(ok=False, lines=(f"FAIL {SINCE}: {exc}",))
    if latest is None:
        return Report(ok=True, lines=(f"ok   {SINCE}: no session recorded yet; served now: "
                                      f"{served}",))
    session, before = latest
    found = changes(before, now)
    if not found:
        return Report(ok=True, lines=(f"ok   {SINCE}: unchanged since session {session} began "
                                      f"({served})",))
    return Report(ok=False, lines=(f"FAIL {SINCE}: since session {session} began: "
                                   f"{'; '.join(found)}",))


async def serving_since_check(client: InferenceClient, store: SessionStore) -> Report:
    """``loopd serving``: read the settings now, then ``serving_since_report``."""
    try:
        now = await fetch_serving(client)
    except InferenceError as exc:
        return Report(ok=False, lines=(f"FAIL {SINCE}: cannot read the serving settings: {exc}",))
    return serving_since_report(now, store)


async def startup_checks(client: InferenceClient, baselines: Baselines,
                         passed: PassedProbes | None = None) -> tuple[bool, str]:
    """What ``serve`` runs before it binds: the self-test, then the budget."""
    tested = await selftest_report(client, passed)
    budget = await budget_report(client, baselines, identity_required=False)
    return tested.ok and budget.ok, "\n".join((*tested.lines, *budget.lines))
