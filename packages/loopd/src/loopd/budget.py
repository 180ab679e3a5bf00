"""The baseline budget (docs/design.md) for every baseline loopd builds, not only the one
``loopd serve`` counts at start: a new session's, each new epoch's, and so every baseline built
after a memory edit (the identity is read afresh for each).

The count is the server's: the system message and the tools array rendered by its chat template
and tokenized by its tokenizer (``inference.budget.ServerTokens``), the same count as the
start-up check's. Identity files the model writes (memory.md, user.md, through the memory tool)
can cost up to 4 tokens a character (docs/decisions/model-text-within-the-slot.md): a baseline
over ``[inference] baseline_budget`` first has those withheld, the costliest first, each replaced
by a notice naming its size, so nothing the model wrote keeps a session from starting. Over the
budget without them (system.md, soul.md or the tools: the owner's), it is refused before anything
is written: a new session is not created; a new epoch does not start, its session stays closed
and the next turn tries again (after the owner shortened what is too long). The refusal names
what each part costs, counted by the same tokenizer. A server that cannot count refuses the same
way, as ``unavailable``: a turn could not run on it either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bxcore.chat import ChatMessage, ToolSchema
from bxcore.memory_tool import EditableFile

from .baseline import Baseline, Identity, IdentityPart
from .errors import BaselineOverBudget, BudgetUncounted
from .inference.errors import InferenceError

log = logging.getLogger("loopd")

MODEL_WRITTEN: tuple[EditableFile, ...] = ("memory.md", "user.md")  # memoryd's, the tool writes


class TokenCounter(Protocol):
    async def baseline(self, system: str, tools: tuple[ToolSchema, ...]) -> int:
        """Tokens of the system message and the tools array as the model sees them."""
        ...

    async def messages(self, messages: Sequence[ChatMessage], tools: tuple[ToolSchema, ...]
                       ) -> int:
        """Tokens of messages and the tools array as the model sees them."""
        ...

    async def text(self, text: str) -> int:
        """Tokens of a text alone."""
        ...


@dataclass(frozen=True, kw_only=True)
class Fitted:
    baseline: Baseline
    identity: Identity
    tokens: int  # the baseline's, by the server
    withheld: tuple[str, ...] = ()  # each withheld file, named with its size


@dataclass(frozen=True, kw_only=True)
class BaselineBudget:
    counter: TokenCounter
    limit: int  # [inference] baseline_budget

    async def fit(self, build: Callable[[Identity], Baseline], identity: Identity, *,
                  what: str) -> Fitted:
        """The baseline ``build`` makes, within the limit: as it is, or with model-written
        identity files withheld, the costliest first, until it fits. Raises
        BaselineOverBudget, naming each part's size, if it is over without them;
        BudgetUncounted if the server cannot count it. ``what``: the session (and epoch) the
        baseline is for, for the messages."""
        try:
            baseline = build(identity)
            total = await self._count(baseline)
            withheld: list[str] = []
            while total > self.limit:
                costliest = await self._costliest_model_written(identity)
                if costliest is None:
                    break
                tokens, part = costliest
                size = f"{part.name} ({tokens:,} tokens, {len(part.text):,} characters)"
                identity = identity.withholding(part.name, self.notice(part.name, tokens))
                withheld.append(size)
                baseline = build(identity)
                total = await self._count(baseline)
            if total <= self.limit:
                if withheld:
                    log.warning("%s: withheld from the baseline, which it would put over "
                                "[inference] baseline_budget = %d: %s", what, self.limit,
                                "; ".join(withheld))
                return Fitted(baseline=baseline, identity=identity, tokens=total,
                              withheld=tuple(withheld))
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

    async def _count(self, baseline: Baseline) -> int:
        return await self.counter.baseline(baseline.system, tuple(baseline.tools))

    async def _costliest_model_written(self, identity: Identity
                                       ) -> tuple[int, IdentityPart] | None:
        costs = [(await self.counter.text(part.text), part) for part in identity.files
                 if part.model_written and not part.withheld]
        return max(costs, key=lambda cost: cost[0], default=None)

    def notice(self, name: str, tokens: int) -> str:
        """What the model sees in a withheld file's place: why, and what it can do."""
        return (f"## {name}\n[withheld: the model server counts it as {tokens:,} tokens, which "
                f"would put the baseline over its budget of {self.limit:,}. Remove or shorten "
                f"entries of {name} with the memory tool (or the owner with bxctl memory); it is "
                "shown again in an epoch that starts once it fits.]")

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
