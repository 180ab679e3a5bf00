"""The turn's async shell: it does what the core (core.py) says, as httpcore drives h11.

Each action is one piece of I/O: append a record (write, fsync), ask the model server for a
completion (its events go to the channel as they arrive), run a tool through the runner. The
shell answers each with the event that says what happened and asks the core for the next; the
core alone decides what comes next, so this file holds no control flow beyond that loop.

The design's steps (docs/design.md, "One turn"), in the actions that do them:

1. ``RecordUser``: append ``User``. Each request is the baseline and the whole log, replayed
   (``replay.messages``; the session keeps it up to date as records are appended).
2. ``RequestCompletion``: ask for a completion; the client forwards its events to the channel.
3. Record it: ``Assistant`` and ``Usage``, and ``CacheLoss`` (told to the channel) when the slot
   lost what the session's previous completion left in it.
4. ``Finish``: no tool calls, the turn is done.
5. ``RunTool`` / ``RecordNotRun``: each call in order, its text capped, its ``ToolResult``
   appended and told to the channel.

Nothing is appended for a request that does not complete (an inference error), save one record
for a prompt the slot refused as too long (``session_full``): its ``Usage``, the prompt's tokens as
the server counted them and nothing generated, so compaction is due before the next turn, also
after a restart (the server may render the log longer than its completions' usage said: floats
in arguments, docs/decisions/model-text-within-the-slot.md). ``Stop`` raises ``TurnEnded``; the
session stays usable. A cancelled turn writes nothing more (``Abandon``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bxcore.chat import ToolCall
from bxcore.errors import ErrorCode
from bxcore.protocol.loop import (
    AnswerTaint,
    ToolCallStarted,
    ToolResultEvent,
    TurnDone,
    TurnUsage,
)
from bxcore.records import Assistant, CacheLoss, ToolResult, Usage, User
from bxcore.util import now_rfc3339

from ..errors import TurnEnded
from ..inference.api import ChatRequest, Completion, EventSink, Inference, cache_outcome
from ..inference.errors import InferenceError, SessionFull, Unavailable, UnreadableOutput
from ..readback import ReadBack
from ..store import Session
from ..tools.dispatch import ToolOutcome, ToolRunner, cap_text, not_run_outcome
from .core import TurnCore, open_calls
from .events import (
    Action,
    Cancelled,
    CompletionFailed,
    CoreEvent,
    Finish,
    RecordNotRun,
    RecordUser,
    RequestCompletion,
    RunTool,
    Stop,
    ToolRecorded,
    TurnStarted,
    UserRecorded,
    completed,
)
from .limits import TurnSettings

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Loop:
    """What a turn needs besides its session: shared by every turn of the process."""

    inference: Inference
    tools: ToolRunner
    settings: TurnSettings = field(default_factory=TurnSettings)
    now: Callable[[], str] = now_rfc3339


async def run_turn(
    loop: Loop, session: Session, content: str, events: EventSink,
    tool_choice: Sequence[str] = (), *, thinking: bool = True, origin: str | None = None,
) -> TurnDone:
    """Run one turn to its answer. Raises TurnEnded when a limit or the model server stops it.

    ``tool_choice`` applies to the turn's completions in order, then the server's default;
    ``thinking`` false asks the server not to think in any of them; ``origin`` (the channel's
    idempotency key) is written with the user message, in the same append."""
    core = TurnCore(loop.settings, tool_choice=tool_choice, thinking=thinking)
    shell = _Shell(loop, session, events, origin)
    action = core.send(TurnStarted(content=content, open_calls=open_calls(session.records)))
    try:
        while True:
            match action:
                case Finish():
                    return _done(action.answer, session)
                case Stop():
                    raise TurnEnded(action.code, action.reason) from action.failure
                case _:
                    action = core.send(await shell.do(action))
    except asyncio.CancelledError:
        core.send(Cancelled())  # Abandon: the next turn answers the calls left open
        raise


class _Shell:
    """The I/O of one turn's actions."""

    def __init__(self, loop: Loop, session: Session, events: EventSink, origin: str | None):
        self._loop = loop
        self._session = session
        self._events = events
        self._origin = origin

    async def do(self, action: Action) -> CoreEvent:
        match action:
            case RecordUser():
                self._session.append(User(time=self._loop.now(), content=action.content,
                                          origin=self._origin))
                return UserRecorded()
            case RequestCompletion():
                return await self._complete(action)
            case RunTool():
                return await self._tool(action.call, action.read, None, cut=action.cut)
            case RecordNotRun():
                return await self._tool(action.call, action.read, action.text, cut=False)
        raise AssertionError(f"{action!r} is final: run_turn ends on it, or it answers "
                             "Cancelled")

    async def _complete(self, action: RequestCompletion) -> CoreEvent:
        session = self._session
        request = ChatRequest(
            messages=session.messages, tools=tuple(session.baseline.tools), slot=session.slot,
            session=session.id, marker=session.marker, tool_choice=action.tool_choice,
            thinking=action.thinking,
            reasoning_spent=action.reasoning_spent,
        )
        try:
            completion = await self._chat(request)
        except InferenceError as exc:
            if isinstance(exc, SessionFull) and exc.prompt_tokens is not None:
                session.append(Usage(time=self._loop.now(), cache_n=0,
                                     prompt_n=exc.prompt_tokens, predicted_n=0,
                                     reasoning_tokens=0, thinking_capped=False))
            return CompletionFailed(code=_inference_code(exc), message=str(exc), failure=exc)
        await record_completion(self._loop, session, completion, self._events)
        if action.tool_choice == "required" and not completion.tool_calls:
            # said, not hidden: the server's grammar may let text come before a call
            _log.warning("session %s: a completion asked for a tool call (tool_choice required) "
                         "came back as text, which answers the turn", session.id)
        return completed(completion)

    async def _chat(self, request: ChatRequest) -> Completion:
        """The completion; asked once more without tools if the server's tool-call parser
        could not read what the model wrote. Nothing of the refused output reached loopd, so
        the log holds only the answer, and the session goes on: a model that writes a broken
        call every time still answers every turn (issue 32)."""
        try:
            return await self._loop.inference.chat(request, self._events)
        except UnreadableOutput as exc:
            if request.tool_choice == "none":
                raise
            _log.warning("session %s: %s; asking again without tools", request.session, exc)
            return await self._loop.inference.chat(
                dataclasses.replace(request, tool_choice="none"), self._events)

    async def _tool(self, call: ToolCall, read: ReadBack, refusal: str | None, *,
                    cut: bool) -> ToolRecorded:
        """Run the call (``refusal`` None) or answer it with ``refusal``; append its result.
        ``read``: its arguments as the core read them. ``cut``: the token limit ended the
        completion inside it (its arguments may be short)."""
        loop, session = self._loop, self._session
        number = session.take_call()
        name = loop.tools.shown_name(call, read)
        if refusal is not None:
            outcome = not_run_outcome(name, refusal)
        else:
            await self._events(ToolCallStarted(name=name))
            outcome = await loop.tools.run(call, read, session=session.id, number=number,
                                           events=self._events, cut=cut)
        await _record(loop, session, call.id, number, outcome, self._events)
        return ToolRecorded(call_id=call.id)


async def record_completion(
    loop: Loop, session: Session, completion: Completion, events: EventSink
) -> None:
    """Append a final completion's ``Assistant`` and ``Usage``, and ``CacheLoss`` if the slot
    lost what the session's previous completion left in it."""
    previous = session.last_usage
    session.append(
        Assistant(
            time=loop.now(),
            content=completion.content,
            reasoning_content=completion.reasoning_content,
            tool_calls=list(completion.tool_calls) if completion.tool_calls is not None else None,
        )
    )
    session.append(
        Usage(
            time=loop.now(), cache_n=completion.cache_n, prompt_n=completion.prompt_n,
            predicted_n=completion.predicted_n, reasoning_tokens=completion.reasoning_tokens,
            thinking_capped=completion.thinking_capped,
        )
    )
    loss = cache_outcome(_as_completion(previous), completion, loop.settings.cache_loss_ratio)
    if loss is not None:
        session.append(CacheLoss(time=loop.now(), expected=loss.expected, got=loss.got))
        await events(loss)


async def _record(
    loop: Loop, session: Session, call_id: str, number: int, outcome: ToolOutcome,
    events: EventSink,
) -> None:
    response = outcome.response
    content, cut = cap_text(response.content, loop.settings.tool_result_cap)
    truncated = cut or response.truncated
    session.append(
        ToolResult.model_validate(
            {"time": loop.now(), "call": number, "tool_call_id": call_id,
             "content": content, "class": response.data_class, "untrusted": response.untrusted,
             "truncated": truncated}
        )
    )
    await events(
        ToolResultEvent.model_validate(
            {"name": outcome.name, "class": response.data_class, "truncated": truncated}
        )
    )


def answer_taint(session: Session) -> AnswerTaint:
    """The session's taint for a channel to show its answer by (gatewayd makes a tainted answer
    inert): every tool result in its log, in any epoch."""
    return AnswerTaint(highest=session.taint.highest, untrusted=session.taint.untrusted)


def _done(completion: Completion, session: Session) -> TurnDone:
    return TurnDone(
        content=completion.content or "",
        taint=answer_taint(session),
        usage=TurnUsage(
            cache_n=completion.cache_n, prompt_n=completion.prompt_n,
            predicted_n=completion.predicted_n, reasoning_tokens=completion.reasoning_tokens,
            thinking_capped=completion.thinking_capped,
        ),
    )


def _as_completion(usage: Usage | None) -> Completion | None:
    """The previous completion as cache_outcome needs it: only its timings matter."""
    if usage is None:
        return None
    return Completion(
        content=None, reasoning_content=None, tool_calls=None, cache_n=usage.cache_n,
        prompt_n=usage.prompt_n, predicted_n=usage.predicted_n,
        reasoning_tokens=usage.reasoning_tokens, thinking_capped=usage.thinking_capped,
    )


def _inference_code(exc: InferenceError) -> ErrorCode:
    if isinstance(exc, SessionFull):
        return ErrorCode.SESSION_FULL
    if isinstance(exc, Unavailable):
        return ErrorCode.UNAVAILABLE
    return ErrorCode.INFERENCE
