"""The values the golden fixtures hold, built in Python: the spec the fixture bytes must match.

tests/fixtures/records/<name>.json is the canonical JSON of RECORDS[name];
tests/fixtures/frames/<name>.json is the JSON part (after the length prefix) of FRAMES[name].
"""

from __future__ import annotations

from dataclasses import dataclass

from bxcore import records
from bxcore.chat import FunctionCall, ToolCall
from bxcore.errors import ErrorCode, WireError
from bxcore.protocol import approval, broker, delegate, loop
from bxcore.tools import DataClass, DecisionRecord, ToolRequest, ToolResponse
from pydantic import BaseModel, TypeAdapter

SESSION = "20260918-074512-3f9a1c2b"
T0 = "2026-09-18T07:45:12.123456Z"
ARGUMENTS = '{"text": "hallo Welt"}'  # kept exactly as the server streamed it, spaces and all
ARGUMENTS_SHA256 = "sha256:" + "5e" * 32
LOG = records.LOG_RECORD

RECORDS: dict[str, tuple[TypeAdapter, BaseModel]] = {
    "session_start": (
        LOG,
        records.SessionStart(
            time=T0, session=SESSION, epoch=0, slot=1, baseline="sha256:" + "ab" * 32
        ),
    ),
    # Non-ASCII text pins "UTF-8, not \u escapes"; the quote and newline pin JSON escaping.
    "user": (LOG, records.User(time=T0, content='Grüße, "Straylight" ☃ 🦀\nnext line')),
    "assistant": (
        LOG,
        records.Assistant(
            time=T0,
            content=None,
            reasoning_content="The user wants an echo. I will find the tool.",
            tool_calls=[
                ToolCall(
                    id="call_0",
                    function=FunctionCall(name="call_tool", arguments=ARGUMENTS),
                )
            ],
        ),
    ),
    "assistant_plain": (
        LOG,
        records.Assistant(
            time=T0, content="It is 07:45 UTC.", reasoning_content=None, tool_calls=None
        ),
    ),
    "usage": (
        LOG,
        records.Usage(
            time=T0, cache_n=1024, prompt_n=37, predicted_n=212, reasoning_tokens=180,
            thinking_capped=False,
        ),
    ),
    "tool_result": (
        LOG,
        records.ToolResult(
            time=T0, call=3, tool_call_id="call_0", content="hallo Welt",
            data_class=DataClass.PRIVATE, untrusted=True, truncated=False,
        ),
    ),
    "cache_loss": (LOG, records.CacheLoss(time=T0, expected=4096, got=12)),
    "epoch_end": (LOG, records.EpochEnd(time=T0, next_epoch=1)),
    "tool_request": (
        TypeAdapter(ToolRequest),
        ToolRequest(session=SESSION, call=3, tool="echo", arguments=ARGUMENTS),
    ),
    "tool_response": (
        TypeAdapter(ToolResponse),
        ToolResponse(
            status="ok", content="hallo Welt", data_class=DataClass.PUBLIC, untrusted=False,
            truncated=False,
        ),
    ),
    "decision_record": (
        TypeAdapter(DecisionRecord),
        DecisionRecord(
            session=SESSION, call=3, tool="echo", arguments_sha256=ARGUMENTS_SHA256,
            verdict="ask", grant="echo.toml", reason="grant echo.toml asks the owner",
        ),
    ),
}


@dataclass(frozen=True)
class GoldenFrame:
    kind: str
    final: bool
    body: BaseModel
    kinds: frozenset[str]  # what the receiving decoder accepts


FRAMES: dict[str, GoldenFrame] = {
    "loop_turn": GoldenFrame(
        loop.TURN, False,
        loop.Turn(session=SESSION, content="What time is it?", resume=False),
        loop.TO_LOOPD,
    ),
    "loop_turn_event_progress": GoldenFrame(
        loop.TURN_EVENT, False,
        loop.TurnEvent(event=loop.Progress(total=2048, cache=1024, processed=512)),
        loop.FROM_LOOPD,
    ),
    "loop_turn_event_tool_result": GoldenFrame(
        loop.TURN_EVENT, False,
        loop.TurnEvent(
            event=loop.ToolResultEvent(name="echo", data_class=DataClass.SECRET, truncated=True)
        ),
        loop.FROM_LOOPD,
    ),
    "loop_turn_event_tool_waiting": GoldenFrame(
        loop.TURN_EVENT, False,
        loop.TurnEvent(event=loop.ToolWaitingEvent(reason="running", elapsed=125)),
        loop.FROM_LOOPD,
    ),
    "loop_turn_done": GoldenFrame(
        loop.TURN_DONE, True,
        loop.TurnDone(
            content="It is 07:45 UTC.",
            usage=loop.TurnUsage(
                cache_n=1024, prompt_n=37, predicted_n=12, reasoning_tokens=0,
                thinking_capped=False,
            ),
        ),
        loop.FROM_LOOPD,
    ),
    "loop_error": GoldenFrame(
        loop.ERROR, True,
        WireError(code=ErrorCode.SESSION_BUSY, message="another turn of this session is running"),
        loop.FROM_LOOPD,
    ),
    "broker_tool_call": GoldenFrame(
        broker.TOOL_CALL, False,
        ToolRequest(session=SESSION, call=3, tool="echo", arguments=ARGUMENTS),
        broker.TO_BROKERD,
    ),
    "broker_tool_waiting": GoldenFrame(
        broker.TOOL_WAITING, False,
        broker.ToolWaiting(approval="apr_7Qx2", expires="2026-09-18T07:50:12Z", elapsed=30),
        broker.FROM_BROKERD,
    ),
    "broker_tool_waiting_running": GoldenFrame(
        broker.TOOL_WAITING, False,
        broker.ToolWaiting(reason="running", elapsed=45),
        broker.FROM_BROKERD,
    ),
    "broker_delegate_run": GoldenFrame(
        delegate.DELEGATE_RUN, False,
        delegate.DelegateRun(session="sub-" + SESSION, task="Summarise notes.md.", rounds=2),
        broker.FROM_BROKERD,
    ),
    "broker_delegate_done": GoldenFrame(
        delegate.DELEGATE_DONE, True,
        delegate.DelegateDone(status="ok", content="notes.md lists three errands."),
        broker.TO_BROKERD,
    ),
    "broker_tool_response": GoldenFrame(
        broker.TOOL_RESPONSE, True,
        ToolResponse(
            status="denied", content="no grant allows echo", data_class=DataClass.PUBLIC,
            untrusted=False, truncated=False,
        ),
        broker.FROM_BROKERD,
    ),
    "approval_request": GoldenFrame(
        approval.APPROVAL_REQUEST, False,
        approval.ApprovalRequest(
            id="apr_7Qx2", session=SESSION, tool="echo", arguments=ARGUMENTS,
            arguments_sha256=ARGUMENTS_SHA256, grant="echo.toml", expires="2026-09-18T07:50:12Z",
        ),
        approval.TO_GATEWAYD,
    ),
    "approval_answer": GoldenFrame(
        approval.APPROVAL_ANSWER, True,
        approval.ApprovalAnswer(id="apr_7Qx2", verdict="approve", by="local:1000"),
        approval.FROM_GATEWAYD,
    ),
}
