"""One turn (M2b design, section 3), with every limit of its table.

1. Append ``User``. Build the request from the baseline and the whole log (the session's mirror).
2. Ask for a completion; the client forwards its events to the channel as they arrive.
3. Append ``Assistant`` and ``Usage``; on a cache loss against the session's previous completion,
   append ``CacheLoss`` and tell the channel.
4. No tool calls: the turn is done.
5. Otherwise answer each call in order, cap its text, append ``ToolResult``, tell the channel; then
   go to 2, unless a limit says stop. A stopped turn keeps what it appended; the session stays
   usable, and every tool call in the log has its ToolResult.

Nothing is appended for a request that does not complete (``session_full``, an inference error):
a failed request leaves no trace in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bxcore.chat import ToolCall
from bxcore.config import Config
from bxcore.errors import ErrorCode
from bxcore.protocol.loop import ToolCallStarted, ToolResultEvent, TurnDone, TurnUsage
from bxcore.records import Assistant, CacheLoss, ToolResult, Usage, User
from bxcore.util import now_rfc3339

from .errors import TurnEnded
from .inference.api import ChatRequest, Completion, EventSink, Inference, cache_outcome
from .inference.errors import InferenceError, SessionFull, Unavailable
from .state import Answered, CalledTools, Stopped, ToolsRan, TurnMachine, UserAppended
from .store import Session
from .tools.dispatch import ToolOutcome, ToolRunner, cap_text, not_run

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


@dataclass(frozen=True, kw_only=True)
class Loop:
    """What a turn needs besides its session: shared by every turn of the process."""

    inference: Inference
    tools: ToolRunner
    settings: TurnSettings = TurnSettings()
    now: Callable[[], str] = now_rfc3339


async def run_turn(
    loop: Loop, session: Session, content: str, events: EventSink,
    tool_choice: Sequence[str] = (), *, thinking: bool = True,
) -> TurnDone:
    """Run one turn to its answer. Raises TurnEnded when a limit or the model server stops it.

    ``tool_choice`` applies to the turn's completions in order, then the server's default;
    ``thinking`` false asks the server not to think in any of them."""
    choices = iter(tool_choice)
    machine = TurnMachine()
    session.append(User(time=loop.now(), content=content))
    machine.process(UserAppended)
    budget = _Budget(loop.settings)
    reasoning = 0
    while True:
        request = ChatRequest(
            messages=session.messages, tools=tuple(session.baseline.tools), slot=session.slot,
            session=session.id, tool_choice=next(choices, None), thinking=thinking,
            reasoning_spent=reasoning,
        )
        completion = await _complete(loop, session, machine, events, request)
        reasoning += completion.reasoning_tokens  # the thinking cap is per turn
        if not completion.tool_calls:
            machine.process(Answered)
            return _done(completion)
        machine.process(CalledTools)
        for call in completion.tool_calls:
            number = session.take_call()
            outcome = await _answer(loop, session.id, number, budget, call, events)
            await _record(loop, session, call.id, number, outcome, events)
        stop = budget.end_of_round()
        if stop is not None:
            machine.process(Stopped)
            raise TurnEnded(ErrorCode.TURN_LIMIT, stop)
        machine.process(ToolsRan)


async def _complete(
    loop: Loop, session: Session, machine: TurnMachine, events: EventSink, request: ChatRequest
) -> Completion:
    try:
        completion = await loop.inference.chat(request, events)
    except InferenceError as exc:
        machine.process(Stopped)
        raise TurnEnded(_inference_code(exc), str(exc)) from exc
    await record_completion(loop, session, completion, events)
    return completion


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


class _Budget:
    """The per-turn limits: tool rounds, and repeated identical calls."""

    def __init__(self, settings: TurnSettings):
        self._settings = settings
        self._rounds = 0
        self._repeats = 0
        self._seen: set[tuple[str, str]] = set()
        self.stopped: str | None = None

    def verdict(self, name: str, arguments: str) -> str | None:
        """None to run the call; otherwise the text its ToolResult says instead."""
        if self.stopped is not None:
            return STOPPED
        if not self._settings.repeat_detection:
            return None
        key = (name, arguments)
        if key not in self._seen:
            self._seen.add(key)
            return None
        self._repeats += 1
        if self._repeats >= 2:
            self.stopped = f"the model repeated an identical {name} call a second time"
        return REPEATED

    def end_of_round(self) -> str | None:
        """Why the turn stops after this round of tool calls, or None to ask for another
        completion."""
        self._rounds += 1
        if self.stopped is None and self._rounds >= self._settings.tool_iterations:
            self.stopped = f"{self._rounds} rounds of tool calls, the limit of one turn"
        return self.stopped


async def _answer(
    loop: Loop, session: str, number: int, budget: _Budget, call: ToolCall, events: EventSink
) -> ToolOutcome:
    name = loop.tools.shown_name(call)
    refusal = budget.verdict(call.function.name, call.function.arguments)
    if refusal is not None:
        return not_run(name, refusal)
    await events(ToolCallStarted(name=name))
    return await loop.tools.run(call, session=session, number=number, events=events)


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


def _done(completion: Completion) -> TurnDone:
    return TurnDone(
        content=completion.content or "",
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
