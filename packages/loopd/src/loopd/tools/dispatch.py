"""One tool call of the model, answered: by loopd itself (``find_tool``, an unknown tool) or by
the port (a core tool called directly, a registry tool through ``call_tool``).

``call_tool`` never hands the port a name the registry does not list as a non-core tool, and
the arguments the port sees are the JSON text of the inner object (docs/design.md, "Core tools").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bxcore.canonical import canonical_text
from bxcore.chat import ToolCall
from bxcore.logs import fields
from bxcore.tools import ToolRequest, ToolResponse, plain_response
from bxcore.tools import cap_text as cap_text  # the turn caps results with it

from ..inference.api import EventSink
from ..readback import ReadBack, read_back
from .port import ToolPort
from .registry import CALL_TOOL, FIND_TOOL, QUOTED, Registry, quoted

log = logging.getLogger("loopd.tools")
_SHOWN = 80  # characters of unreadable arguments quoted back to the model


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    name: str  # the tool that was meant: call_tool's target, when it names one
    response: ToolResponse


class WriteCheck(Protocol):
    async def refusal(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """Why a call must not reach its tool, for the model (identity_writes.py); None: send
        it."""
        ...


class ToolRunner:
    def __init__(self, registry: Registry, port: ToolPort, writes: WriteCheck | None = None):
        self.registry = registry
        self.port = port
        self.writes = writes

    def shown_name(self, call: ToolCall, read: ReadBack) -> str:
        """The name a channel shows for a call: call_tool's target when there is one.
        ``read``: its arguments as ``readback.read_back`` gives them."""
        if call.function.name == CALL_TOOL.name and isinstance(read, dict):
            target = read.get("name")
            if isinstance(target, str) and self.registry.is_discoverable(target):
                return target  # a listed name: never text the channel cannot carry
        return call.function.name

    async def run(self, call: ToolCall, read: ReadBack, *, session: str,
                  number: int, events: EventSink, cut: bool = False) -> ToolOutcome:
        """The call's outcome, whatever the model put in it. ``read``: its arguments as
        ``readback.read_back`` gives them (the turn's one parse): the object it runs on, or why
        the server cannot read them back, answered "Not run". Arguments that cannot be encoded
        (a lone surrogate, nesting too deep to write back) are answered, not raised, so every
        tool call in the log has its result and the session replays. ``cut``: the completion
        ended at its token limit (finish_reason "length") inside this call."""
        try:
            return await self._run(call, read, session=session, number=number, events=events,
                                   cut=cut)
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("call %d of session %s not run: its arguments cannot be encoded: %s",
                        number, session, exc,
                        extra=fields(session=session, call=number, tool=call.function.name))
            return _ours(self.shown_name(call, read),
                         f"Not run: the arguments of {call.function.name} hold text that cannot "
                         "be encoded (a lone surrogate, or nesting too deep).")

    async def _run(self, call: ToolCall, read: ReadBack, *, session: str,
                   number: int, events: EventSink, cut: bool) -> ToolOutcome:
        name = call.function.name
        if isinstance(read, str):  # the replay shows the model a placeholder, not these
            told = cut_text if cut else unreadable_text
            return _ours(name, told(name, call.function.arguments, read))
        arguments = read
        if name == FIND_TOOL.name:
            query = arguments.get("query")
            if not isinstance(query, str):
                return _ours(name, 'find_tool needs {"query": "<words>"}.')
            return _ours(name, self.registry.find_tool_text(query), "ok")
        if name == CALL_TOOL.name:
            return await self._call_tool(arguments, session=session, number=number, events=events)
        if self.registry.is_port_core(name):
            refusal = await self._refusal(name, arguments)
            if refusal is not None:
                return _ours(name, refusal)
            request = ToolRequest(
                session=session, call=number, tool=name, arguments=call.function.arguments
            )
            return ToolOutcome(name=name, response=await self.port.call(request, events))
        return _ours(name, self.registry.unknown_tool_text(name, through_call_tool=False))

    async def _call_tool(
        self, arguments: dict[str, Any], *, session: str, number: int, events: EventSink
    ) -> ToolOutcome:
        target = arguments.get("name")
        if not isinstance(target, str) or not self.registry.is_discoverable(target):
            unknown = self.registry.unknown_tool_text(target, through_call_tool=True)
            return _ours(CALL_TOOL.name, unknown)
        inner = arguments.get("arguments", {})
        if isinstance(inner, str):  # small models often send the object as JSON text
            read = read_back(inner)
            if isinstance(read, str):
                return _ours(target, unreadable_text(f"{target} (inside call_tool)", inner, read))
            inner = read
        if not isinstance(inner, dict):
            return _ours(target, "Not run: call_tool's arguments must be a JSON object.")
        refusal = await self._refusal(target, inner)
        if refusal is not None:
            return _ours(target, refusal)
        request = ToolRequest(
            session=session, call=number, tool=target, arguments=canonical_text(inner)
        )
        return ToolOutcome(name=target, response=await self.port.call(request, events))


    async def _refusal(self, tool: str, arguments: Any) -> str | None:
        if self.writes is None or not isinstance(arguments, dict):
            return None
        return await self.writes.refusal(tool, arguments)


def unreadable_text(name: str, arguments: str, problem: str) -> str:
    """What the model is told about arguments it sent that cannot be read back: the reason and
    where, and the start of the text, so it can send them again as one JSON object."""
    name = _named(name)
    return (f"Not run: your arguments for {name} ({len(arguments)} characters, starting "
            f"{_start(arguments)}) are not a JSON object the model server can read back: "
            f"{problem}. Call {name} again with its arguments as one JSON object, every string "
            "in it escaped as JSON requires.")


def cut_text(name: str, arguments: str, problem: str) -> str:
    """What the model is told about a call its token limit cut off: that the limit, not its
    escaping, ended it, and that the same call would be cut at the same place."""
    name = _named(name)
    return (f"Not run: your call to {name} was cut off at the token limit (max_tokens) after "
            f"{len(arguments)} characters of arguments, starting {_start(arguments)}, so they "
            f"are not a whole JSON object ({problem}). Sending the same call again will be cut "
            "at the same place. Send less in one call: split long text over several calls (write "
            "the first part, then add the rest in further calls), or shorten it.")


def not_run_outcome(name: str, reason: str) -> ToolOutcome:
    """The answer for a call the loop decided not to run (a repeat, a stopped turn)."""
    return _ours(name, reason)


def _named(name: str) -> str:
    """A tool name the model chose, as an answer names it: whole if short, else quoted and
    cut, so a long name is never echoed back whole."""
    return name if len(name) <= QUOTED else quoted(name)


def _start(arguments: str) -> str:
    start = _carried(arguments[:_SHOWN]) + ("..." if len(arguments) > _SHOWN else "")
    return json.dumps(start)


def _ours(name: str, content: str, status: Literal["ok", "failed"] = "failed") -> ToolOutcome:
    # A name the model made up may hold what no channel can carry (a lone surrogate): escaped.
    return ToolOutcome(name=_carried(name), response=plain_response(status, _carried(content)))


def _carried(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")

