"""Helpers for memoryd's tests: a config, session logs and taint files as loopd and brokerd
write them, and memory tool calls as brokerd sends them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bxcore.canonical import canonical_json
from bxcore.config import Config, parse_config
from bxcore.frames import Frame
from bxcore.protocol import memory as proto
from bxcore.records import Assistant, ToolResult, User
from bxcore.tools import ToolResponse

T = "2026-11-30T07:00:00.000000Z"


def config(home: Path, extra: str = "") -> Config:
    return parse_config(f'[paths]\nhome = "{home}"\nrun = "{home}/run"\n{extra}', "test.toml")


def user(text: str) -> User:
    return User(time=T, content=text)


def answer(text: str) -> Assistant:
    return Assistant(time=T, content=text, reasoning_content=None, tool_calls=None)


def calling() -> Assistant:
    from bxcore.chat import FunctionCall, ToolCall
    call = ToolCall(id="c1", function=FunctionCall(name="fetch", arguments="{}"))
    return Assistant(time=T, content=None, reasoning_content="thinking", tool_calls=[call])


def result(text: str, data_class: str = "public", untrusted: bool = False) -> ToolResult:
    return ToolResult.model_validate({
        "time": T, "call": 1, "tool_call_id": "c1", "content": text, "class": data_class,
        "untrusted": untrusted, "truncated": False,
    })


def append_log(home: Path, session: str, epoch: int, records: list[Any]) -> int:
    """Append records to sessions/<session>/<epoch>.jsonl; returns the first new line number."""
    path = home / "sessions" / session / f"{epoch}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    first = (len(path.read_bytes().splitlines()) if path.exists() else 0) + 1
    with path.open("ab") as handle:
        for record in records:
            handle.write(canonical_json(record) + b"\n")
    return first


def write_taint(home: Path, session: str, classes: list[str], untrusted: bool) -> None:
    """brokerd's broker/sessions/<id>.json, in the form brokerd/taint.py writes."""
    directory = home / "broker" / "sessions"
    directory.mkdir(parents=True, exist_ok=True)
    body = {"session": session, "classes": classes, "untrusted": untrusted}
    (directory / f"{session}.json").write_bytes(canonical_json(body) + b"\n")


def call_frame(tool: str, args: dict[str, Any], session: str = "s1", data_class: str = "public",
               untrusted: bool = False) -> Frame:
    body = {"request": {"session": session, "call": 1, "tool": tool,
                        "arguments": json.dumps(args)},
            "class": data_class, "untrusted": untrusted}
    return Frame.of(proto.MEMORY_CALL, body, final=False)


async def call(service: Any, tool: str, args: dict[str, Any], **taint: Any) -> ToolResponse:
    return await service.memory_call(call_frame(tool, args, **taint).parse(proto.MemoryCall))


async def turn(service: Any, home: Path, session: str, records: list[Any], epoch: int = 0
               ) -> proto.TurnRecorded:
    """What loopd does after a turn: append to the log, then send turn_finished."""
    first = append_log(home, session, epoch, records)
    body = proto.TurnFinished(session=session, epoch=epoch, first_line=first, records=records)
    return service.turn_finished(body)


def recalled(response: ToolResponse) -> list[dict[str, Any]]:
    return json.loads(response.content)["results"]
