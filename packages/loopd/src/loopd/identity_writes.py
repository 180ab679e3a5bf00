"""The baseline budget at the moment the model writes its identity (docs/decisions/
model-text-within-the-slot.md): a ``memory`` call that adds text to memory.md or user.md
(``add``, ``replace``, a ``consolidate`` that rewrites) is not sent on when it would put the
baseline a new epoch gets over ``[inference] baseline_budget``, counted by the server's
tokenizer. The model is told why, in numbers, and what it can do instead.

The count is an estimate, not the exact result: the baseline now (the identity as memoryd would
give a new epoch, a file the budget withholds at its whole length, and what loopd's system
prompt and tools add), plus the tokens of the new text and an entry separator, less the tokens
of what the write takes out (a ``replace``'s ``old_text``, a ``consolidate``'s entries not
kept). So a write that shortens a file is never refused, however far over the baseline is:
that is how a withheld file comes back. Epoch start withholds a file that is still over
(budget.py), so this check is the courteous part, not the guarantee: a server or memoryd that
cannot answer lets the write through.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .budget import MODEL_WRITTEN
from .epochs import Baselines
from .errors import LoopError
from .inference.errors import InferenceError

log = logging.getLogger("loopd")

ENTRY_TOKENS = 8  # the separator line between entries, and the file heading's changed count
MEMORY_TOOL = "memory"


def removed_text(arguments: dict[str, Any], entries: Sequence[str]) -> list[str]:
    """What a memory call that adds text takes out of its file: a ``replace``'s ``old_text``
    (part of the entry it replaces), a ``consolidate``'s entries that are not kept."""
    if arguments.get("action") == "replace":
        old = arguments.get("old_text")
        return [old] if isinstance(old, str) else []
    plan = arguments.get("plan") if arguments.get("action") == "consolidate" else None
    if not isinstance(plan, list):
        return []
    return [entries[step["entry"]] for step in plan
            if isinstance(step, dict) and step.get("fate") != "kept"
            and isinstance(step.get("entry"), int) and 0 <= step["entry"] < len(entries)]


def written_text(arguments: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The model-written file a memory call adds text to, and those texts; None for any call
    that adds none (remove, note, consolidate without rewrites, arguments memoryd refuses)."""
    file, action = arguments.get("file"), arguments.get("action")
    if file not in MODEL_WRITTEN:
        return None
    texts: list[Any]
    if action in ("add", "replace"):
        texts = [arguments.get("text")]
    elif action == "consolidate" and isinstance(arguments.get("plan"), list):
        texts = [step.get("text") for step in arguments["plan"]
                 if isinstance(step, dict) and step.get("fate") == "rewritten"]
    else:
        return None
    strings = [text for text in texts if isinstance(text, str)]
    return (file, strings) if strings else None


@dataclass
class IdentityWrites:
    """``refusal`` for a memory call, with ``baselines`` (which has a budget) as the judge."""

    baselines: Baselines
    _probe: str = field(default_factory=lambda: f"write-probe-{secrets.token_hex(4)}")
    _epochs: itertools.count[int] = field(default_factory=itertools.count)

    async def refusal(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """Why the call must not be sent on, for the model; None to send it."""
        budget = self.baselines.budget
        written = written_text(arguments) if tool == MEMORY_TOOL else None
        if written is None or budget is None:
            return None
        file, texts = written
        try:
            # A probe session of its own, a new epoch each time: memoryd reads the files afresh.
            baseline, identity = await self.baselines.build(self._probe, next(self._epochs),
                                                             None)
            now = await budget.counter.baseline(baseline.system, tuple(baseline.tools))
            added = await budget.counter.text("\n".join(texts)) + ENTRY_TOKENS
            entries = next((part.entries for part in identity.files if part.name == file), ())
            removed = removed_text(arguments, entries)
            taken = await budget.counter.text("\n".join(removed)) if removed else 0
        except (InferenceError, LoopError) as exc:
            log.warning("the memory write to %s was not counted against the baseline budget "
                        "(epoch start still fits it): %s", file, exc)
            return None
        if now + added - taken <= budget.limit or added - ENTRY_TOKENS <= taken:
            return None
        characters = sum(len(text) for text in texts)
        takes_out = f", takes out {taken:,}" if taken else ""
        return (f"Not written: {file} would put the baseline (the system prompt with the "
                f"identity files, and the tools: what every request starts with) at about "
                f"{now + added - taken:,} tokens, over its budget of {budget.limit:,}. The model "
                f"server counts this text as {added - ENTRY_TOKENS:,} tokens for {characters:,} "
                f"characters{takes_out}, and the baseline is {now:,} tokens now. Write it much "
                "shorter, or first make room: remove entries, or consolidate memory.md or "
                "user.md.")
