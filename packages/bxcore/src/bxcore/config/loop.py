"""[loop] and [baseline]: loopd's turn limits, its tool port and its system prompt."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._common import ConfigPath, Section


class LoopSection(Section):
    tool_iterations: Annotated[int, Field(ge=1)] = 8
    repeat_detection: bool = True
    tool_result_cap: Annotated[int, Field(ge=64)] = 16 * 1024  # bytes of UTF-8
    # Which port answers tool calls: "broker", the only one, sends every call to brokerd over
    # broker.sock ([broker] socket). Kept as a key so a config naming anything else (the test
    # double "fake" that once shipped here) is refused, naming loop.tools.
    tools: Literal["broker"] = "broker"
    # The tool registry: a JSON array of tool schemas with a "core" flag, as the toolkit
    # publishes it (``bx-tool schemas``); loopd refuses to start without one.
    registry: ConfigPath | None = None
    # Where a new epoch's identity comes from, and who hears of finished turns: "memoryd" (left
    # out: the default) asks memory.sock (and refuses to start an epoch while memoryd cannot be
    # reached); "off" reads the [baseline] identity files and tells nobody.
    memory: Literal["memoryd", "off"] | None = None
    # Compaction: when a turn ends with the slot holding at least this share of
    # [inference.serving] per_slot_context, the session is compacted before its next turn.
    compact_at: Annotated[float, Field(gt=0, le=1)] = 0.75
    summary_tokens: Annotated[int, Field(ge=16)] = 1024  # cap on the compaction summary

    def memory_source(self) -> Literal["memoryd", "off"]:
        return "memoryd" if self.memory is None else self.memory


class BaselineSection(Section):
    system: ConfigPath | None = None  # system.md; default: beside the config file
    # Identity files appended to the system text, in order, when not empty; relative paths are
    # taken under [paths] home. Read only with [loop] memory = "off": otherwise memoryd's
    # identity snapshot (soul.md, memory.md, user.md) takes their place.
    identity: list[str] = Field(default_factory=lambda: ["memory/core.md"])
