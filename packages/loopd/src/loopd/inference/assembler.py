"""Deltas in, one Completion out: a pure accumulator for one streamed completion.

    assembler = CompletionAssembler()
    for item in chunks:              # from chunks.parse_chunk
        events = assembler.add(item) # channel events: progress, reasoning, content
    completion = assembler.finish(thinking_capped=False)

``content``, ``reasoning_content`` and the tool calls come out exactly as the server streamed
them: text fragments concatenated, a tool call's id, type and name from its first delta and its
``arguments`` the concatenation of every fragment, never re-encoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bxcore.chat import FunctionCall, ToolCall
from bxcore.protocol.loop import Content, Progress, Reasoning, TurnEventBody

from .api import Completion
from .chunks import ChunkItem, Done, ServerChunk, ServerErrorBody, Timings, ToolCallDelta
from .errors import (
    UNREADABLE_OUTPUT,
    BadStream,
    ServerStreamError,
    StreamCut,
    UnreadableOutput,
)


@dataclass
class _PartialToolCall:
    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class CompletionAssembler:
    def __init__(self) -> None:
        self.completion_id: str | None = None
        self.reasoning_tokens = 0  # one per streamed reasoning fragment: the server sends a
        # chunk per sampled token, and a token never spans two chunks
        self.done = False
        self._content: list[str] | None = None
        self._reasoning: list[str] | None = None
        self._tool_calls: dict[int, _PartialToolCall] = {}
        self._finish_reason: str | None = None
        self._timings: Timings | None = None

    def add(self, item: ChunkItem) -> list[TurnEventBody]:
        if self.done:
            raise BadStream("the server sent data after [DONE]")
        if isinstance(item, ServerErrorBody):
            if UNREADABLE_OUTPUT in item.message:
                raise UnreadableOutput(f"the server could not read the model's output "
                                       f"mid-stream: {item.message}")
            raise ServerStreamError(f"the server failed mid-stream: {item.message}")
        if isinstance(item, Done):
            self.done = True
            return []
        return self._chunk(item)

    def _chunk(self, chunk: ServerChunk) -> list[TurnEventBody]:
        if self.completion_id is None:
            self.completion_id = chunk.id
        events: list[TurnEventBody] = []
        if chunk.prompt_progress is not None:
            p = chunk.prompt_progress
            events.append(Progress(total=p.total, cache=p.cache, processed=p.processed))
        if chunk.timings is not None:
            self._timings = chunk.timings
        for choice in chunk.choices:
            if choice.index != 0:
                raise BadStream(f"a chunk for choice {choice.index}; Boxmaker asks for one")
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
            delta = choice.delta
            if delta.reasoning_content is not None:
                self._reasoning = self._reasoning or []
                self._reasoning.append(delta.reasoning_content)
                self.reasoning_tokens += 1
                events.append(Reasoning(text=delta.reasoning_content))
            if delta.content is not None:
                self._content = self._content or []
                self._content.append(delta.content)
                if delta.content:
                    events.append(Content(text=delta.content))
            for call in delta.tool_calls or ():
                self._tool_call(call)
        return events

    def _tool_call(self, call: ToolCallDelta) -> None:
        partial = self._tool_calls.setdefault(call.index, _PartialToolCall())
        if call.id is not None:
            partial.id = call.id
        if call.type is not None:
            partial.type = call.type
        function = call.function
        if function is not None:
            if function.name is not None:
                partial.name = (partial.name or "") + function.name
            if function.arguments is not None:
                partial.arguments.append(function.arguments)

    def finish(self, *, thinking_capped: bool) -> Completion:
        """The whole completion; StreamCut if the server had not finished, BadStream if what
        it sent does not add up to a completion."""
        if not self.done:
            raise StreamCut("the stream ended before [DONE]")
        if self._finish_reason is None:
            raise BadStream("the stream reached [DONE] without a finish_reason")
        if self._timings is None:
            raise BadStream("the stream reached [DONE] without timings")
        t = self._timings
        return Completion(
            content=None if self._content is None else "".join(self._content),
            reasoning_content=None if self._reasoning is None else "".join(self._reasoning),
            tool_calls=self._finished_tool_calls(),
            cache_n=t.cache_n,
            prompt_n=t.prompt_n,
            predicted_n=t.predicted_n,
            reasoning_tokens=self.reasoning_tokens,
            thinking_capped=thinking_capped,
            finish_reason=self._finish_reason,
        )

    def _finished_tool_calls(self) -> tuple[ToolCall, ...] | None:
        if not self._tool_calls:
            return None
        calls = []
        for index in sorted(self._tool_calls):
            partial = self._tool_calls[index]
            if partial.id is None or partial.name is None:
                raise BadStream(f"tool call {index} was streamed without an id or a name")
            if partial.type not in (None, "function"):
                raise BadStream(f"tool call {index} has type {partial.type!r}, not 'function'")
            function = FunctionCall(name=partial.name, arguments="".join(partial.arguments))
            calls.append(ToolCall(id=partial.id, function=function))
        return tuple(calls)
