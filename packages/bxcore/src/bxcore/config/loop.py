"""[loop] and [baseline]: loopd's turn limits and its system prompt."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ._common import ConfigPath, Section


class LoopSection(Section):
    tool_iterations: Annotated[int, Field(ge=1)] = 8
    repeat_detection: bool = True
    tool_result_cap: Annotated[int, Field(ge=64)] = 16 * 1024  # bytes of UTF-8


class BaselineSection(Section):
    system: ConfigPath | None = None  # system.md; default: beside the config file
