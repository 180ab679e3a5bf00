"""broker.sock round trips: decisions and results are audited, denials too; results are capped
and labelled; taint follows results and rebuilds byte-identically from the audit log; memory
tools go to memoryd with the session's taint; a job's calls meet the grants of the moment."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from brokerd.audit import entries, verify
from brokerd.taint import TaintStore, rebuild
from brokerd_support import answer_of, call_tool, make_rig, request, serve, write
from bxcore.frames import Frame, encode_frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker as broker_wire
from bxcore.protocol import memory as memory_wire
from bxcore.tools import ToolResponse

ECHO = 'tools = ["echo"]\nmode = "auto"\nclasses = ["public", "private"]\n' \
       'result_class = "private"\nallow_untrusted = true\n'


def kinds(rig) -> list[str]:
    return [e.kind if e.kind == "result" else e.decision.verdict for e in entries(rig.audit_dir)]


@pytest.mark.parametrize("runs_for", [0.0, 0.3], ids=["quick", "past-the-waiting-interval"])
def test_an_allowed_call_runs_and_is_audited(tmp_path, runs_for):
    """Its answer may follow tool_waiting notices (the rig sends one every 0.05 s while the call
    runs: a busy machine gets some even for the quick call; the slow one always does)."""
    rig = make_rig(tmp_path)
    rig.backend.delay = runs_for
    write(rig.grants, "echo.toml", ECHO)
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("echo", '{"text": "hi"}')))
    frame = answer_of(frames)
    if runs_for:
        assert len(frames) > 1  # the notices came, and answer_of accepted them
    response = frame.parse(ToolResponse)
    assert frame.kind == broker_wire.TOOL_RESPONSE and frame.final
    assert (response.status, response.content, response.data_class.value) == \
        ("ok", "done", "private")
    assert kinds(rig) == ["allow", "result"]
    assert verify(rig.audit_dir)[0] == []


def test_clock_is_answered_by_brokerd_with_no_grant_and_audited_like_any_call(tmp_path):
    """The one real tool every session has (docs/design.md, "Core tools"): no grant file lists it,
    brokerd answers it from its own clock, and the audit log holds its decision and result."""
    rig = make_rig(tmp_path)
    write(rig.grants, "deny-all.toml", 'tools = ["*"]\nmode = "deny"\n')
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("clock", "{}")))
    response = frames[-1].parse(ToolResponse)
    assert (response.status, response.content) == ("ok", "2026-11-30T12:00:00.000000Z")
    assert response.data_class.value == "public" and not response.untrusted
    assert rig.backend.runs == []  # no sandbox: brokerd answers it itself
    decision, result = entries(rig.audit_dir)
    assert decision.decision.grant == "builtin:clock" and decision.decision.verdict == "allow"
    assert (result.kind, result.tool, result.call) == ("result", "clock", 1)
    assert verify(rig.audit_dir)[0] == []


def test_a_denied_call_is_audited_and_never_runs(tmp_path):
    rig = make_rig(tmp_path)
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("fs.read", '{"path": "/"}')))
    response = frames[-1].parse(ToolResponse)
    assert response.status == "denied" and "no grant" in response.content
    assert kinds(rig) == ["deny"] and rig.backend.runs == []
    assert not rig.taint_dir.exists()


def answer_to_raw_bytes(rig, tmp_path, data: bytes) -> Frame:
    async def body(sock):
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(data)
        await writer.drain()
        stream = FrameStream(reader, writer, broker_wire.FROM_BROKERD)
        frame = await stream.read(5)
        await stream.close()
        return frame

    return serve(rig, tmp_path, body)


def test_a_malformed_frame_gets_an_error(tmp_path):
    frame = answer_to_raw_bytes(make_rig(tmp_path), tmp_path, struct.pack(">I", 5) + b"nope!")
    assert frame.kind == "error" and frame.body["code"] == "bad_frame"


def test_a_request_that_is_not_a_tool_request_gets_an_error(tmp_path):
    bad = encode_frame(Frame.of(broker_wire.TOOL_CALL, {"session": "../x"}, final=True))
    frame = answer_to_raw_bytes(make_rig(tmp_path), tmp_path, bad)
    assert frame.kind == "error" and frame.body["code"] == "bad_request"


def test_results_are_capped(tmp_path):
    rig = make_rig(tmp_path)
    write(rig.grants, "echo.toml", ECHO)
    rig.backend.content = "é" * 2000
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("echo", '{"text": "x"}')))
    response = frames[-1].parse(ToolResponse)
    assert response.truncated and len(response.content.encode()) <= 1024
    assert response.content.endswith("[truncated]")


def test_taint_follows_results_and_rebuilds_byte_identically(tmp_path):
    rig = make_rig(tmp_path)
    write(rig.grants, "echo.toml", ECHO)
    write(rig.grants, "fetch.toml", 'tools = ["http.fetch"]\nmode = "auto"\n'
          'classes = ["public", "private"]\nresult_class = "public"\n')

    async def body(sock):
        await call_tool(sock, request("echo", '{"text": "a"}', session="a"))
        rig.backend.untrusted = True
        await call_tool(sock, request("http.fetch", '{"url": "https://x.y/"}', session="b"))
        await call_tool(sock, request("echo", '{"text": "b"}', call=2, session="b"))

    serve(rig, tmp_path, body)
    live = {p.name: p.read_bytes() for p in rig.taint_dir.iterdir()}
    assert json.loads(live["a.json"]) == {"session": "a", "classes": ["private"],
                                          "untrusted": False}
    assert json.loads(live["b.json"]) == {"session": "b", "classes": ["public", "private"],
                                          "untrusted": True}
    out = TaintStore(tmp_path / "rebuilt")
    rebuild(((e.session, e.data_class, e.untrusted) for e in entries(rig.audit_dir)
             if e.kind == "result"), out)
    assert {p.name: p.read_bytes() for p in out.directory.iterdir()} == live


def test_a_tainted_session_is_refused_by_a_grant_that_does_not_allow_its_classes(tmp_path):
    rig = make_rig(tmp_path)
    write(rig.grants, "echo.toml", ECHO)
    write(rig.grants, "public.toml", 'tools = ["http.fetch"]\nmode = "auto"\n'
          'classes = ["public"]\nresult_class = "public"\n')

    async def body(sock):
        await call_tool(sock, request("echo", '{"text": "a"}'))  # the session sees private
        return await call_tool(sock, request("http.fetch", '{"url": "https://x.y/"}', call=2))

    frames = serve(rig, tmp_path, body)
    assert frames[-1].body["status"] == "denied"
    assert "has seen private data" in frames[-1].body["content"]


def test_a_job_run_meets_the_grants_as_they_are_at_that_moment(tmp_path):
    """Two runs of a scheduled job make the same call; the grant is removed in between."""
    rig = make_rig(tmp_path)
    grant = write(rig.grants, "echo.toml", ECHO)
    job_call = request("echo", '{"text": "morning"}', session="job-morning-1")

    async def body(sock):
        first = await call_tool(sock, job_call)
        grant.unlink()
        second = await call_tool(sock, job_call.model_copy(update={"session": "job-morning-2"}))
        return first, second

    first, second = serve(rig, tmp_path, body)
    assert first[-1].body["status"] == "ok"
    assert second[-1].body["status"] == "denied"
    assert kinds(rig) == ["allow", "result", "deny"]


def test_memory_tools_go_to_memoryd_with_the_sessions_taint(tmp_path):
    memory_sock = tmp_path / "memory.sock"
    rig = make_rig(tmp_path, memory=memory_sock)
    write(rig.grants, "echo.toml", ECHO)
    seen: list[memory_wire.MemoryCall] = []

    async def memoryd(reader, writer):
        stream = FrameStream(reader, writer, memory_wire.TO_MEMORYD)
        seen.append((await stream.read(5)).parse(memory_wire.MemoryCall))
        await stream.write(Frame.of(memory_wire.TOOL_RESPONSE, ToolResponse.model_validate({
            "status": "ok", "content": "[memory-tainted] a note", "class": "private",
            "untrusted": True, "truncated": False}), final=True))
        await stream.close()

    async def body(sock):
        server = await asyncio.start_unix_server(memoryd, str(memory_sock))
        try:
            await call_tool(sock, request("echo", '{"text": "a"}'))
            return await call_tool(sock, request("recall", '{"query": "x"}', call=2))
        finally:
            server.close()

    frames = serve(rig, tmp_path, body)
    response = frames[-1].parse(ToolResponse)
    assert response.content == "[memory-tainted] a note" and response.untrusted
    (call,) = seen
    assert call.request.tool == "recall" and call.data_class.value == "private"
    assert call.untrusted is False
    assert rig.broker.taints.get("s1").untrusted
    assert kinds(rig) == ["allow", "result", "allow", "result"]


@pytest.mark.parametrize(("code", "told"), [
    ("internal", False),  # memoryd's own failure: its files, edit numbers, entries' bytes
    ("bad_request", True),  # a refusal of this call: the model may act on it
])
def test_memoryds_own_failure_is_not_told_to_the_model(tmp_path, code, told):
    memory_sock = tmp_path / "memory.sock"
    rig = make_rig(tmp_path, memory=memory_sock)
    message = "/state/memory/edits/00000002.json: not a journal entry: b'{\"secret\"'"

    async def memoryd(reader, writer):
        stream = FrameStream(reader, writer, memory_wire.TO_MEMORYD)
        await stream.read(5)
        await stream.write(Frame.of("error", {"code": code, "message": message}, final=True))
        await stream.close()

    async def body(sock):
        server = await asyncio.start_unix_server(memoryd, str(memory_sock))
        try:
            return await call_tool(sock, request("memory", '{"action": "note", "text": "x"}'))
        finally:
            server.close()

    response = serve(rig, tmp_path, body)[-1].parse(ToolResponse)
    assert response.status == "failed" and response.content.startswith("Memory is unavailable")
    assert (message in response.content) is told


def test_memoryd_down_is_a_failed_call_not_a_crash(tmp_path):
    rig = make_rig(tmp_path)
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("recall", '{"query": "x"}')))
    response = frames[-1].parse(ToolResponse)
    assert response.status == "failed" and "Memory is unavailable" in response.content


@pytest.mark.parametrize("name", ["broker.sock", "approve.sock"])
def test_sockets_are_owner_only(tmp_path, name):
    rig = make_rig(tmp_path)
    modes = serve(rig, tmp_path, lambda s: asyncio.sleep(0, (s.parent / name).stat().st_mode))
    assert modes & 0o777 == 0o600
