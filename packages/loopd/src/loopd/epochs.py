"""Compaction as an epoch change (docs/design.md), and where each epoch's baseline comes from.

When a turn ends with the slot holding at least ``compact_at_tokens`` (what its last completion
left there, or the prompt the slot last refused as too long, plus a bound on what was appended
after it: tool results of a turn that ended before the model answered,
docs/decisions/replay-what-the-server-reads.md), the session is compacted before its next turn
starts, while no turn runs (the server holds the session's lock):

1. Close the epoch: one completion on the session's slot whose request is the epoch's whole
   message array plus ``COMPACT_INSTRUCTION`` as the newest message, so the server reuses the
   cache and processes only the instruction; if the slot refuses that as too long, the same
   with long texts left out, then with fewer messages (``replay.fitting_views``), down to the
   baseline alone and last with its summary left out. The summary is asked for with at most
   the tokens the next epoch's opening has room for (``Baselines.summary_cap``), without
   reasoning: a reasoning model would spend a small cap thinking and return no summary, every
   time (the third attack on issue 32). If it gives a summary, the log gets ``User`` (the
   instruction), ``Assistant`` (the summary, exactly as returned), ``Usage`` and
   ``epoch_end``: the old epoch's replay stays exact, and its log is kept. If the model wrote
   no summary (nothing, only reasoning, or only a tool call: ``shows_anything``), the epoch
   closes all the same, its ``epoch_end`` carrying ``no_summary_notice`` in place of a
   summary: nothing a model emits keeps a full epoch open for good. If the model server
   failed, nothing is appended and the turn runs in the old epoch (compaction is tried again
   before the next one).
2. Open the next epoch: a new baseline, built now (system.md and the identity as they are now,
   from memoryd, fitted to the budget), plus the summary (``summary_of`` the closed log), cut
   if the opening would not fit under ``compact_at_tokens``, and the new epoch's files on the
   same slot. If memoryd cannot be reached the epoch does not start (``MemoryUnavailable``);
   the session stays closed, and the next turn finishes the change from the summary in the
   closed log.

Which step comes when is the session's core (session/core.py); this module holds the pure
rules it asks and the baselines; sessions.py does the I/O.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bxcore.chat import ToolSchema
from bxcore.config import Config
from bxcore.protocol.loop import Content, Reasoning, TurnEventBody
from bxcore.records import Assistant, EpochEnd, SessionStart, ToolResult, Usage, User
from bxcore.visible import is_invisible

from .baseline import Baseline, Identity
from .budget import BaselineBudget, Fitted
from .errors import CorruptSession
from .inference.api import EventSink
from .log import Record
from .memory import Memory
from .turn import TurnSettings

log = logging.getLogger("loopd")

COMPACT_INSTRUCTION = (
    "[compaction] This conversation is about to be compacted: what came before will be "
    "replaced by the summary you write now. Write it for yourself, to carry on from: what the "
    "owner asked for and what is still open, what was decided and done, the facts you will need "
    "and where each came from (say which came from tools, files or the web), and what you were "
    "about to do next. Plain text, no tool calls."
)

# Tokens a message's template wrapping may add to its text (role tags, a tool_response block).
MESSAGE_TOKENS = 16
SMALLEST_RESULT_CAP = 512  # bytes: the cap the slot's room never takes a tool result below
SUMMARY_WRAPPING = 64  # tokens: SUMMARY_HEADING and the user message around the summary
SMALLEST_SUMMARY = 16  # tokens: summary_tokens' own minimum ([loop] summary_tokens)
SUMMARY_CUTS = 6  # tries at cutting a summary to fit before it is left out
NOTICE_MESSAGES = 3  # the owner's last messages a notice in place of a summary repeats
NOTICE_MESSAGE_CHARACTERS = 500  # of each

BaselineSource = Callable[[str, int, "str | None"], Awaitable[Baseline]]


@dataclass(frozen=True, kw_only=True)
class EpochSettings:
    compact_at_tokens: int | None = None  # None: never compact by itself
    summary_tokens: int = 1024
    # The slot's room above the compaction point, in tokens; None when the context is unknown.
    room_tokens: int | None = None

    @classmethod
    def from_config(cls, config: Config, *, served_context: int | None = None) -> EpochSettings:
        """The limit is ``compact_at`` of the per-slot context: the recorded one if
        ``[inference.serving] per_slot_context`` is set, else what the server says
        (``served_context``), so compaction needs no configuration."""
        context = config.inference.serving.per_slot_context or served_context
        limit = None if context is None else int(config.loop.compact_at * context)
        room = None if context is None or limit is None else context - limit
        return cls(compact_at_tokens=limit, summary_tokens=config.loop.summary_tokens,
                   room_tokens=room)

    def capped(self, settings: TurnSettings) -> TurnSettings:
        """The turn settings with the tool-result cap (UTF-8 bytes) at most the slot's room
        above the compaction point: a token is at least one byte, so one result alone never
        takes a session from below ``compact_at`` past the slot."""
        if self.room_tokens is None:
            return settings
        cap = min(settings.tool_result_cap, max(self.room_tokens, SMALLEST_RESULT_CAP))
        return dataclasses.replace(settings, tool_result_cap=cap)


@dataclass(frozen=True, kw_only=True)
class Baselines:
    """Builds each epoch's baseline afresh: system.md, then the identity text, then tools; and,
    with a ``budget``, fits it under it (budget.py: model-written identity files withheld, else
    refused) and, with an ``opening_limit`` too (``compact_at_tokens``), cuts the summary so the
    epoch's opening fits under it: an epoch never starts that a plain turn cannot follow, nor
    one due for compaction before its first turn. Without a budget (a test double's server that
    has no tokenizer) nothing is counted."""

    system: Path
    tools: Sequence[ToolSchema]
    memory: Memory
    budget: BaselineBudget | None = None
    opening_limit: int | None = None

    async def __call__(self, session: str, epoch: int, summary: str | None) -> Baseline:
        return (await self.fitted(session, epoch, summary)).baseline

    async def fitted(self, session: str, epoch: int, summary: str | None) -> Fitted:
        """The baseline, fitted to the budget, and what was withheld from it."""
        identity = await self.memory.identity(session, epoch)
        if self.budget is None:
            return Fitted(baseline=self.assemble(identity, summary), identity=identity, tokens=0)
        fitted = await self.budget.fit(lambda i: self.assemble(i, None), identity,
                                       what=f"session {session} epoch {epoch}")
        if summary is None:
            return fitted
        baseline = await self._summarised(fitted, summary, what=f"session {session} epoch "
                                                                 f"{epoch}")
        return dataclasses.replace(fitted, baseline=baseline)

    async def build(self, session: str, epoch: int, summary: str | None
                    ) -> tuple[Baseline, Identity]:
        """The baseline, uncounted, and the identity it holds."""
        identity = await self.memory.identity(session, epoch)
        return self.assemble(identity, summary), identity

    def assemble(self, identity: Identity, summary: str | None) -> Baseline:
        return Baseline.assemble(system=self.system, identity=identity.text, tools=self.tools,
                                 summary=summary)

    async def summary_cap(self, baseline: Baseline, summary_tokens: int) -> int:
        """``summary_tokens``, or less: what the slot leaves under ``opening_limit`` above
        ``baseline`` (the epoch's, as the next one's is not built yet), so the summary is not
        written longer than the next epoch's opening can hold."""
        if self.budget is None or self.opening_limit is None:
            return summary_tokens
        without = baseline.model_copy(update={"summary": None})
        tokens = await self.budget.counter.baseline(without.system, tuple(without.tools))
        room = self.opening_limit - tokens - SUMMARY_WRAPPING
        return max(SMALLEST_SUMMARY, min(summary_tokens, room))

    async def _summarised(self, fitted: Fitted, summary: str, *, what: str) -> Baseline:
        """The fitted baseline with the summary, cut (its start kept) until the opening fits
        under ``opening_limit``; at last only a notice that it was left out."""
        assert self.budget is not None
        counter, tools = self.budget.counter, tuple(fitted.baseline.tools)
        shown = summary
        for _ in range(SUMMARY_CUTS):
            baseline = fitted.baseline.model_copy(update={"summary": shown})
            if self.opening_limit is None:
                return baseline
            tokens = await counter.messages(baseline.opening(), tools)
            if tokens <= self.opening_limit:
                if shown is not summary:
                    log.warning("%s: the summary (%d characters) was cut to %d so the opening "
                                "fits under %d tokens", what, len(summary), len(shown),
                                self.opening_limit)
                return baseline
            room = self.opening_limit - fitted.tokens - SUMMARY_WRAPPING
            spent = max(tokens - fitted.tokens, 1)
            keep = int(len(shown) * max(room, 0) / spent * 0.9)
            if cut_summary(summary, keep) == shown:
                break  # the notice alone is over: counting it again changes nothing
            shown = cut_summary(summary, keep)
        log.warning("%s: the summary was left out: the baseline leaves it no room under %d "
                    "tokens", what, self.opening_limit or 0)
        return fitted.baseline.model_copy(update={"summary": cut_summary(summary, 0)})


def cut_summary(summary: str, keep: int) -> str:
    """The summary's first ``keep`` characters and a note saying it was cut."""
    note = (f"[cut here: the summary is {len(summary):,} characters, more than the context "
            "holds above the baseline; recall finds the details]")
    return f"{summary[:keep].rstrip()}\n{note}" if keep > 0 else note


def needs_compaction(records: Sequence[Record], settings: EpochSettings) -> bool:
    """True if the epoch's last completion left the slot at or above the limit, counting what
    was appended after it (a turn that ended on its tool results, or on a request the slot
    refused) at its UTF-8 bytes, more than its tokens: pure, and never short."""
    limit = settings.compact_at_tokens
    if limit is None or isinstance(records[-1], EpochEnd):
        return False
    usage = next((r for r in reversed(records) if isinstance(r, Usage)), None)
    held = 0 if usage is None else usage.cache_n + usage.prompt_n + usage.predicted_n
    return held + appended_since_completion(records) >= limit


def appended_since_completion(records: Sequence[Record]) -> int:
    """At least the tokens the records after the last completion add to the prompt."""
    added = 0
    for record in reversed(records):
        if isinstance(record, Assistant | Usage):
            break
        if isinstance(record, User | ToolResult):
            added += len(record.content.encode("utf-8")) + MESSAGE_TOKENS
    return added


def shows_anything(text: str) -> bool:
    """Whether a reader sees anything of ``text``: white space, zero-width, format and
    control characters alone make an empty summary that only looks like one (the attack on
    issue 32 closed an epoch with U+200B U+2060 U+FEFF as its summary)."""
    return any(not char.isspace() and not is_invisible(char) for char in text)


def no_summary_notice(records: Sequence[Record], wrote: str) -> str:
    """What the next epoch opens with when the model wrote no summary: a fixed notice and the
    owner's last messages of the epoch (each cut), so it can carry on from what was asked."""
    asked = [record.content for record in records if isinstance(record, User)]
    shown = [text if len(text) <= NOTICE_MESSAGE_CHARACTERS
             else f"{text[:NOTICE_MESSAGE_CHARACTERS]}[… cut: {len(text):,} characters]"
             for text in asked[-NOTICE_MESSAGES:]]
    lines = [f"[compaction] The model wrote {wrote} when asked to summarise the conversation "
             "before this point, so there is no summary; recall finds its details."]
    if shown:
        lines.append("The owner's last messages before it, oldest first:")
        lines.extend(f"- {text}" for text in shown)
    return "\n".join(lines)


def summary_of(records: Sequence[Record]) -> str:
    """The summary a closed epoch ends with: its ``epoch_end``'s notice, else its last
    assistant message's content."""
    end = records[-1]
    if isinstance(end, EpochEnd) and end.summary is not None:
        return end.summary
    last = next((r for r in reversed(records) if isinstance(r, Assistant)), None)
    if last is None or not (last.content or "").strip():
        start = records[0]
        where = f"session {start.session} epoch {start.epoch}" \
            if isinstance(start, SessionStart) else "the epoch"
        raise CorruptSession(f"{where}: closed without a summary before epoch_end")
    return last.content or ""


def progress_only(events: EventSink) -> EventSink:
    """The channel sees the summary's progress, queueing and retries, not its text: the text is
    for the next epoch, not the answer to the turn."""

    async def forward(event: TurnEventBody) -> None:
        if not isinstance(event, Content | Reasoning):
            await events(event)

    return forward
