"""The baseline budget (docs/design.md): the baseline's tokens, counted by the server.

The baseline (system message and core tool schemas) is rendered by the server's own chat
template (``/apply-template``) and tokenized by its own tokenizer (``/tokenize``), so the count is
what the model sees. ``check_budget`` fails over ``[inference].baseline_budget``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bxcore.chat import ChatMessage, SystemMessage, ToolSchema, message_json

from .client import InferenceClient
from .errors import BadStream, OverBudget


@dataclass(frozen=True, kw_only=True)
class BudgetReport:
    tokens: int
    budget: int

    @property
    def ok(self) -> bool:
        return self.tokens <= self.budget

    def describe(self) -> str:
        verdict = "within" if self.ok else "OVER"
        return f"baseline: {self.tokens} tokens, {verdict} the budget of {self.budget}"


@dataclass(frozen=True)
class ServerTokens:
    """Tokens as the model sees them: rendered by the server's chat template, counted by its
    tokenizer. Raises InferenceError when the server cannot say."""

    client: InferenceClient

    async def baseline(self, system: str, tools: tuple[ToolSchema, ...]) -> int:
        """The system message and the tools array, as the template renders them."""
        return await self.messages((SystemMessage(content=system),), tools)

    async def messages(self, messages: Sequence[ChatMessage], tools: tuple[ToolSchema, ...]
                       ) -> int:
        """Messages (an epoch's opening: the system message and the summary) and the tools
        array, as the template renders them."""
        rendered = await self.client.post_json(
            "/apply-template",
            {
                "model": self.client.section.model,
                "messages": [message_json(message) for message in messages],
                "tools": [tool.as_openai_tool() for tool in tools],
            },
        )
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise BadStream(f"/apply-template answered without a prompt: {str(rendered)[:200]}")
        return await self.text(prompt)

    async def text(self, text: str) -> int:
        """A text alone, tokenized as it is (no template)."""
        tokenized = await self.client.post_json(
            "/tokenize", {"model": self.client.section.model, "content": text})
        tokens = tokenized.get("tokens") if isinstance(tokenized, dict) else None
        if not isinstance(tokens, list):
            raise BadStream(f"/tokenize answered without tokens: {str(tokenized)[:200]}")
        return len(tokens)


async def count_baseline_tokens(
    client: InferenceClient, system: str, tools: tuple[ToolSchema, ...]
) -> BudgetReport:
    tokens = await ServerTokens(client).baseline(system, tools)
    return BudgetReport(tokens=tokens, budget=client.section.baseline_budget)


async def check_budget(
    client: InferenceClient, system: str, tools: tuple[ToolSchema, ...]
) -> BudgetReport:
    """The report, or OverBudget (whose message is the report) when the baseline is too big."""
    report = await count_baseline_tokens(client, system, tools)
    if not report.ok:
        raise OverBudget(report.describe())
    return report
