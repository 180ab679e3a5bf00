"""[loop] and [baseline]: loopd's turn limits, its tool port and its system prompt."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._common import ConfigPath, Section


class LoopSection(Section):
    tool_iterations: Annotated[int, Field(ge=1)] = 8
    repeat_detection: bool = True
    tool_result_cap: Annotated[int, Field(ge=64)] = 16 * 1024  # bytes of UTF-8
    # Which port answers tool calls: "fake" is M2b's in-process clock and echo; "broker" sends
    # every call to brokerd over broker.sock ([broker] socket).
    tools: Literal["fake", "broker"] = "fake"
    # The registry for the broker port: a JSON array of tool schemas with a "core" flag, as the
    # toolkit publishes it. The fake port brings its own.
    registry: ConfigPath | None = None


class BaselineSection(Section):
    system: ConfigPath | None = None  # system.md; default: beside the config file
    # Identity files appended to the system text, in order, when not empty; relative paths are
    # taken under [paths] home. memoryd's identity files replace the default in M5.
    identity: list[str] = Field(default_factory=lambda: ["memory/core.md"])
