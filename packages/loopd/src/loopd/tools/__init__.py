"""Tools as loopd sees them: the port every call goes through, the registry, and the dispatcher
that answers ``find_tool`` and ``call_tool`` itself (docs/design.md, "The agent loop")."""

from .dispatch import ToolRunner
from .port import ToolPort
from .registry import (
    CALL_TOOL,
    FIND_TOOL,
    Registry,
    load_registry,
    with_clock,
    with_memory_tools,
)

__all__ = [
    "CALL_TOOL", "FIND_TOOL", "Registry", "ToolPort", "ToolRunner",
    "load_registry", "with_clock", "with_memory_tools",
]
