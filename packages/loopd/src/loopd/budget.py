"""The baseline budget (docs/design.md) for every baseline loopd builds, not only the one
``loopd serve`` counts at start: a new session's, each new epoch's, and so every baseline built
after a memory edit (the identity is read afresh for each).

The count is the server's: the system message and the tools array rendered by its chat template
and tokenized by its tokenizer (``inference.budget.ServerTokens``), the same count as the
start-up check's. A baseline over ``[inference] baseline_budget`` is refused before anything is
written: a new session is not created; a new epoch does not start, its session stays closed and
the next turn tries again (after the owner shortened what is too long). The refusal names what
each part costs, counted by the same tokenizer: the system prompt, the tools and each identity
file. A server that cannot count refuses the same way, as ``unavailable``: a turn could not run
on it either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bxcore.chat import ToolSchema

from .baseline import Baseline, Identity
from .errors import BaselineOverBudget, BudgetUncounted
from .inference.errors import InferenceError


class TokenCounter(Protocol):
    async def baseline(self, system: str, tools: tuple[ToolSchema, ...]) -> int:
        """Tokens of the system message and the tools array as the model sees them."""
        ...

    async def text(self, text: str) -> int:
        """Tokens of a text alone."""
        ...


@dataclass(frozen=True, kw_only=True)
class BaselineBudget:
    counter: TokenCounter
    limit: int  # [inference] baseline_budget

    async def check(self, baseline: Baseline, identity: Identity, *, what: str) -> None:
        """Raise BaselineOverBudget, naming each part's size, if the baseline is over the
        limit; BudgetUncounted if the server cannot count it. ``what``: the session (and
        epoch) the baseline is for, for the message."""
        try:
            total = await self.counter.baseline(baseline.system, tuple(baseline.tools))
            if total <= self.limit:
                return
            parts = await self._parts(baseline, identity, total)
        except InferenceError as exc:
            raise BudgetUncounted(
                f"{what}: the baseline's tokens cannot be counted by the model server, so it is "
                f"not started: {exc}") from exc
        raise BaselineOverBudget(
            f"{what}: the baseline is {total:,} tokens, over [inference] baseline_budget = "
            f"{self.limit:,}, so it is not started; by the server's tokenizer: "
            f"{'; '.join(parts)}. Shorten system.md or an identity file (bxctl memory), or "
            f"raise the budget")

    async def _parts(self, baseline: Baseline, identity: Identity, total: int) -> list[str]:
        system = system_prompt(baseline, identity)
        tools = total - await self.counter.baseline(baseline.system, ())
        parts = [f"system prompt {await self.counter.text(system):,} tokens "
                 f"({len(system):,} characters)",
                 f"tools {tools:,} tokens ({len(baseline.tools)} schemas)"]
        for file in identity.files:
            parts.append(f"{file.name} {await self.counter.text(file.text):,} tokens "
                         f"({len(file.text):,} characters)")
        return parts


def system_prompt(baseline: Baseline, identity: Identity) -> str:
    """The system prompt's own text: the baseline's system text without the identity after it
    (``Baseline.assemble``)."""
    text = identity.text.strip()
    if not text or not baseline.system.endswith(text):
        return baseline.system
    return baseline.system[: len(baseline.system) - len(text)].rstrip()
