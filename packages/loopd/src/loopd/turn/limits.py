"""The limits of one turn (docs/design.md, "Turn limits"): rounds of tool calls and repeated
identical calls. Pure: the core asks, per call, whether to run it, and at the end of each round
whether the turn goes on. A stopped turn keeps what it appended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bxcore.canonical import canonical_text
from bxcore.chat import ToolCall
from bxcore.config import Config

from ..readback import ReadBack, read_back
from .events import RecordNotRun, RunTool

REPEATED = (
    "Not run: this call repeats an earlier call of this turn with the same arguments. "
    "Use the earlier result."
)
STOPPED = "Not run: the turn was stopped by a limit."


@dataclass(frozen=True, kw_only=True)
class TurnSettings:
    tool_iterations: int = 8
    repeat_detection: bool = True
    tool_result_cap: int = 16 * 1024
    cache_loss_ratio: float = 0.5

    @classmethod
    def from_config(cls, config: Config) -> TurnSettings:
        return cls(
            tool_iterations=config.loop.tool_iterations,
            repeat_detection=config.loop.repeat_detection,
            tool_result_cap=config.loop.tool_result_cap,
            cache_loss_ratio=config.inference.cache_loss_ratio,
        )


class Limits:
    """The per-turn limits: rounds of tool calls, and repeated identical calls."""

    def __init__(self, settings: TurnSettings):
        self._settings = settings
        self.rounds = 0
        self._repeats = 0
        self._seen: set[tuple[str, str]] = set()
        self._stopped: str | None = None

    def answer(self, call: ToolCall) -> RunTool | RecordNotRun:
        """Run the call, or record why not: a repeat, or a turn a limit has stopped. Its
        arguments are read here, once, for the repeat check and for the run."""
        read = read_back(call.function.arguments)
        if self._stopped is not None:
            return RecordNotRun(call=call, read=read, text=STOPPED)
        if not self._settings.repeat_detection:
            return RunTool(call=call, read=read)
        key = (call.function.name, repeat_key(call.function.arguments, read))
        if key not in self._seen:
            self._seen.add(key)
            return RunTool(call=call, read=read)
        self._repeats += 1
        if self._repeats >= 2:
            self._stopped = f"the model repeated an identical {call.function.name} call a " \
                            "second time"
        return RecordNotRun(call=call, read=read, text=REPEATED)

    def end_of_round(self) -> str | None:
        """Why the turn stops after this round, or None to ask for another completion."""
        self.rounds += 1
        if self._stopped is None and self.rounds >= self._settings.tool_iterations:
            self._stopped = f"{self.rounds} rounds of tool calls, the limit of one turn"
        return self._stopped


def repeat_key(arguments: str, read: ReadBack) -> str:
    """Arguments as compared for a repeat: the object read back as JSON text in one form, so
    that other whitespace or key order is the same call (a small model writes the same call
    both ways), each number as the model is shown it; arguments that cannot be read back as
    the text they are."""
    return canonical_text(_as_shown(read)) if isinstance(read, dict) else arguments


def _as_shown(value: Any) -> Any:
    """A number with a fraction or exponent that the template engine writes back as an integer
    (C's ``%g``: 1.0 and 1e0 as 1) is that integer: the model sees the two calls alike (the
    attack on issue 32). -0.0 ("-0") and 1e6 ("1e+06") are shown otherwise and stay apart.
    ``read_back`` bounds the depth."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and f"{value:.6g}" == str(int(value)) else value
    if isinstance(value, list):
        return [_as_shown(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_shown(item) for key, item in value.items()}
    return value
