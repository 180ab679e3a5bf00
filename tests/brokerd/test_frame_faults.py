"""Whose fault a bad frame is, on broker.sock, at both ends.

The peer's bad frame (RemoteProtocolError) is answered with an ``error`` frame that names the
frame and the field, audited as refused, and the connection closed. Our own bad frame
(LocalProtocolError) is our bug: brokerd logs it and tells loopd ``internal``, never
``bad_frame`` or ``bad_request``; loopd's client raises it out of the call instead of reporting
that brokerd failed, and sends brokerd nothing.
"""

from __future__ import annotations

import logging

import pytest
from brokerd.audit import entries
from brokerd_support import answer_of, call_tool, make_rig, request, serve, write
from bxcore.errors import LocalProtocolError, WireError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker as broker_wire
from bxcore.tools import DataClass, ToolRequest, ToolResponse
from loopd.tools.broker import BrokerPort

ECHO = 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\nresult_class = "public"\n'


def test_the_peers_bad_frame_gets_an_error_frame_naming_the_frame_and_the_field(tmp_path):
    rig = make_rig(tmp_path)
    bad = {"session": "s1", "call": -1, "tool": "echo", "arguments": "{}"}

    async def body(sock):
        stream = await FrameStream.connect(sock, broker_wire.FROM_BROKERD)  # sends unchecked
        try:
            await stream.write(Frame(kind=broker_wire.TOOL_CALL, final=False, body=bad))
            return await stream.read(10)
        finally:
            await stream.close()

    answer = serve(rig, tmp_path, body)
    error = answer.parse(WireError)
    assert (answer.kind, answer.final, error.code) == ("error", True, "bad_request")
    assert error.message.startswith("frame 'tool_call': call: ")
    (refused,) = entries(rig.audit_dir)
    assert refused.kind == "refused" and "not a tool request" in refused.reason


def test_our_bad_answer_is_logged_as_our_bug_and_the_peer_is_told_internal(
        tmp_path, monkeypatch, caplog):
    rig = make_rig(tmp_path)
    write(rig.grants, "echo.toml", ECHO)

    async def broken_call(req, on_waiting, children=None):  # a bug: a response never validated
        return ToolResponse.model_construct(status="maybe", content="x", untrusted=False,
                                            truncated=False, data_class=DataClass.PUBLIC)

    monkeypatch.setattr(rig.broker, "call", broken_call)
    with caplog.at_level(logging.ERROR, logger="brokerd.sockets"):
        frames = serve(rig, tmp_path, lambda s: call_tool(s, request("echo", '{"text": "a"}')))
    answer = answer_of(frames)
    error = answer.parse(WireError)
    assert (answer.kind, error.code) == ("error", "internal")
    # Logged by broker.sock's own logger, at ERROR: a record from elsewhere would not do.
    logged = [r.getMessage() for r in caplog.records
              if (r.name, r.levelno) == ("brokerd.sockets", logging.ERROR)]
    assert any("our bug, not the peer's: frame 'tool_response' we were sending: status" in m
               for m in logged), caplog.text


def test_loopds_own_bad_request_raises_local_protocol_error_and_sends_nothing(tmp_path):
    rig = make_rig(tmp_path)
    unchecked = ToolRequest.model_construct(session="../escape", call=1, tool="echo",
                                            arguments="{}")
    events: list[object] = []

    async def send_event(event: object) -> None:
        events.append(event)

    async def body(sock):
        with pytest.raises(LocalProtocolError, match="frame 'tool_call' we were sending: "
                                                     "session"):
            await BrokerPort(sock).call(unchecked, send_event)

    serve(rig, tmp_path, body)
    assert list(entries(rig.audit_dir)) == [] and events == []  # brokerd received nothing to audit
