"""Test support for the agent loop: a scripted ``Inference`` for fault injection and limits, an
event collector, and a ready-made loop over a temp home with FakeTools.

The scripted inference answers each request with the next ``Reply`` (or raises the scripted
error) and fills in timings like a server whose cache holds the previous request: ``cache_n`` is
what the slot held after the previous completion, unless a reply says otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bxcore.chat import FunctionCall, ToolCall, ToolSchema
from bxcore.daemon import Notifier
from bxcore.frames import Frame, error_frame
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import TurnDone, TurnEventBody
from loopd import sockets
from loopd.baseline import Baseline
from loopd.errors import LoopError
from loopd.inference.api import ChatRequest, Completion, EventSink, Inference
from loopd.sockets import StartupCheck
from loopd.store import Session, SessionStore
from loopd.tools import Registry, ToolRunner
from loopd.turn import Loop, TurnSettings
from loopd.wiring import LoopParts, ServingSource, sessions
from support.fake_tools import FakeTools

FIXED_TIME = "2026-09-18T12:00:00.000000Z"


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments JSON text)
    cache_n: int | None = None  # None: a cache hit on everything the slot held
    prompt_n: int = 10
    predicted_n: int = 5
    thinking_capped: bool = False
    events: tuple[TurnEventBody, ...] = ()


def say(text: str, **kw: object) -> Reply:
    return Reply(content=text, **kw)  # type: ignore[arg-type]


def call(*calls: tuple[str, str], **kw: object) -> Reply:
    return Reply(tool_calls=calls, **kw)  # type: ignore[arg-type]


@dataclass
class ScriptedInference:
    script: list[Reply | Exception]
    requests: list[ChatRequest] = field(default_factory=list)
    _slot_tokens: int = 0
    _calls: int = 0

    async def chat(self, request: ChatRequest, events: EventSink) -> Completion:
        self.requests.append(request)
        if not self.script:
            raise AssertionError("the loop asked for more completions than the script has")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        for event in step.events:
            await events(event)
        tool_calls = None
        if step.tool_calls:
            tool_calls = tuple(self._tool_call(name, args) for name, args in step.tool_calls)
        cache_n = self._slot_tokens if step.cache_n is None else step.cache_n
        completion = Completion(
            content=step.content, reasoning_content=step.reasoning, tool_calls=tool_calls,
            cache_n=cache_n, prompt_n=step.prompt_n, predicted_n=step.predicted_n,
            reasoning_tokens=len((step.reasoning or "").split()),
            thinking_capped=step.thinking_capped,
        )
        self._slot_tokens = completion.slot_tokens
        return completion

    def _tool_call(self, name: str, arguments: str) -> ToolCall:
        self._calls += 1
        function = FunctionCall(name=name, arguments=arguments)
        return ToolCall(id=f"call-{self._calls}", function=function)


class Events:
    """Collects every event the loop sends, in order."""

    def __init__(self) -> None:
        self.seen: list[TurnEventBody] = []

    async def __call__(self, event: TurnEventBody) -> None:
        self.seen.append(event)

    def types(self) -> list[str]:
        return [event.type for event in self.seen]


SYSTEM = "You are a test assistant."


def fake_registry() -> Registry:
    return Registry(FakeTools.schemas)


def sample_baseline(summary: str | None = None) -> Baseline:
    return Baseline(system=SYSTEM, tools=fake_registry().core_schemas(), summary=summary)


async def fixed_baselines(session: str, epoch: int, summary: str | None) -> Baseline:
    """A BaselineSource whose identity never changes: the same system text every epoch."""
    return sample_baseline(summary)


def make_loop(
    inference: object, *, tools: FakeTools | None = None, **settings: object
) -> Loop:
    port = tools or FakeTools(now=lambda: FIXED_TIME)
    return Loop(
        inference=inference,  # type: ignore[arg-type]
        tools=ToolRunner(fake_registry(), port),
        settings=TurnSettings(**settings),  # type: ignore[arg-type]
        now=lambda: FIXED_TIME,
    )


def new_session(home: Path, session_id: str = "s1", slot: int = 0) -> Session:
    return SessionStore(home).create(session_id, sample_baseline(), slot=slot, time=FIXED_TIME)


def record_types(session: Session) -> list[str]:
    return [record.type for record in session.records]


def registry_json(schemas: Sequence[ToolSchema]) -> str:
    """A registry file's text for ``schemas``, as ``bx-tool schemas`` writes one."""
    return json.dumps([s.model_dump(mode="json") for s in schemas], indent=2) + "\n"


async def final_frame(turn: Awaitable[TurnDone]) -> Frame:
    """A turn's outcome as loop.sock's final frame: its ``turn_done``, or the ``error`` a
    LoopError (a bxcore Refused) crosses as (bxcore.daemon.answering). Anything else raises."""
    try:
        done = await turn
    except LoopError as exc:
        return error_frame(exc.code, str(exc))
    return Frame.of(wire.TURN_DONE, done, final=True)


async def run(parts: LoopParts, inference: Inference, checks: StartupCheck, *,
              serving: ServingSource | None = None, notifier: Notifier | None = None,
              stop: asyncio.Event | None = None) -> int:
    """``loopd serve`` as wiring.serve runs it (``checks``, then the sessions over
    ``inference``, then loop.sock), without the signal handling."""
    return await sockets.run(parts.config, parts.source, checks,
                             lambda: sessions(parts, inference, serving),
                             notifier=notifier, stop=stop)
