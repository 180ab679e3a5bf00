"""A turn's origin, the channel's idempotency key, looked up in the session's log: pure, no I/O.

A channel that may resend a turn (gatewayd, after a crash between writing the ``turn`` and
marking the post delivered) names it with ``Turn.origin``. loopd writes the origin into the
turn's ``User`` record, in the same append as the message, so the log says whether that turn was
taken. ``taken`` finds it and says what the earlier turn came to:

- ``TurnDone``: it finished; the same content (and the usage of its last completion) is the
  answer again, so the channel can post it;
- ``None``: it was taken but has no answer (loopd stopped or a limit ended it mid-turn); the
  turn is not run twice.

A turn still running is never looked up: its session's lock answers ``session_busy`` first.
Only the session's current epoch is searched: the resend comes on the channel's restart, before
any later turn of the session could have compacted it away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bxcore.protocol.loop import TurnDone, TurnUsage
from bxcore.records import Assistant, Usage, User

from .log import Record


@dataclass(frozen=True)
class Taken:
    """The turn that carried the origin: its user record's line (1-based) and its answer."""

    line: int
    answer: TurnDone | None


def taken(records: Sequence[Record], origin: str) -> Taken | None:
    """The earlier turn with this origin in ``records``, or None if there is none."""
    for index, record in enumerate(records):
        if isinstance(record, User) and record.origin == origin:
            return Taken(line=index + 1, answer=_answer(records[index + 1:]))
    return None


def _answer(after: Sequence[Record]) -> TurnDone | None:
    """The turn's answer: its last completion, if that called no tools, with its usage."""
    turn = list(_until_next_user(after))
    for index in range(len(turn) - 1, -1, -1):
        record = turn[index]
        if isinstance(record, Assistant):
            if record.tool_calls:
                return None
            usage = next((r for r in turn[index + 1:] if isinstance(r, Usage)), None)
            return TurnDone(content=record.content or "", usage=_usage(usage))
    return None


def _until_next_user(records: Sequence[Record]) -> Sequence[Record]:
    for index, record in enumerate(records):
        if isinstance(record, User):
            return records[:index]
    return records


def _usage(usage: Usage | None) -> TurnUsage:
    if usage is None:
        return TurnUsage(cache_n=0, prompt_n=0, predicted_n=0, reasoning_tokens=0,
                         thinking_capped=False)
    return TurnUsage(
        cache_n=usage.cache_n, prompt_n=usage.prompt_n, predicted_n=usage.predicted_n,
        reasoning_tokens=usage.reasoning_tokens, thinking_capped=usage.thinking_capped,
    )
