"""Approvals: an ``ask`` call suspends (sending tool_waiting) until an allowlisted approver
answers on approve.sock or through gatewayd, or the approval expires (a denial). An id is
unguessable, bound to its call, and good for one answer."""

from __future__ import annotations

import asyncio
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import hypothesis.strategies as st
import pytest
from brokerd.approvals import ApprovalBook
from brokerd.audit import entries
from brokerd.errors import ApprovalExpired, ApprovalMismatch, NotAnApprover, UnknownApproval
from brokerd_support import ASK, approve_socket, call_tool, make_rig, pending_ids, request, write
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import approval as wire
from bxcore.protocol import broker as broker_wire
from bxcore.util import sha256
from hypothesis import given, settings
from support.brokerd import start

LOCAL = f"local:{os.getuid()}"
T0 = datetime(2026, 11, 30, tzinfo=UTC)


# --- the book, pure -------------------------------------------------------------------------

def book() -> ApprovalBook:
    return ApprovalBook(frozenset({"owner"}), timedelta(seconds=60))


def test_ids_are_unguessable_and_bound_to_their_call():
    b = book()
    first = b.open(request("echo", '{"text": "a"}'), "g", T0)
    second = b.open(request("echo", '{"text": "b"}', call=2), "g", T0)
    assert first.id != second.id and len(first.id) >= 32
    assert first.arguments_sha256 == sha256(b'{"text": "a"}')
    with pytest.raises(ApprovalMismatch):
        b.outcome(first.id, "echo", second.arguments_sha256)
    with pytest.raises(ApprovalMismatch):
        b.outcome(first.id, "fs.write", first.arguments_sha256)


@pytest.mark.parametrize(("by", "when", "error"), [
    ("mallory", T0, NotAnApprover),
    ("owner", T0 + timedelta(seconds=60), ApprovalExpired),
])
def test_answers_that_do_not_count(by, when, error):
    b = book()
    approval = b.open(request("echo"), "g", T0)
    with pytest.raises(error):
        b.answer(wire.ApprovalAnswer(id=approval.id, verdict="approve", by=by), when)
    assert b.outcome(approval.id, "echo", approval.arguments_sha256) is None


def test_an_id_answers_once_and_is_then_unknown():
    b = book()
    approval = b.open(request("echo"), "g", T0)
    answer = wire.ApprovalAnswer(id=approval.id, verdict="approve", by="owner")
    b.answer(answer, T0)
    with pytest.raises(UnknownApproval, match="already used"):
        b.answer(answer, T0)
    b.close(approval.id)
    with pytest.raises(UnknownApproval, match="already used"):
        b.answer(answer, T0)
    with pytest.raises(UnknownApproval, match="no pending approval"):
        b.answer(answer.model_copy(update={"id": "made-up"}), T0)


# --- end to end over broker.sock and approve.sock --------------------------------------------

def scenario(tmp_path, body, *, approvers=frozenset({LOCAL}), ttl=30.0, gateway=None,
             pass_rig=False):
    """Run ``body(broker_sock, approve_sock)`` (``body(rig, ...)`` with ``pass_rig``)."""
    rig = make_rig(tmp_path, approvers=approvers, ttl=ttl, gateway=gateway)
    write(rig.grants, "echo.toml", ASK)
    sockets = tmp_path / "broker.sock", tmp_path / "approve.sock"

    async def main():
        servers = await start(rig.broker, *sockets)
        try:
            return await (body(rig, *sockets) if pass_rig else body(*sockets))
        finally:
            for server in servers:
                server.close()

    return rig, asyncio.run(main())


def verdicts(rig) -> list[tuple[str, str]]:
    return [(e.decision.verdict, e.decision.reason) for e in entries(rig.audit_dir)
            if e.kind == "decision"]


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_the_owner_answers_on_approve_sock(tmp_path, verdict):
    async def body(broker_sock, approve_sock):
        call = asyncio.create_task(call_tool(broker_sock, request("echo", '{"text": "hi"}')))
        (approval_id,) = await pending_ids(approve_sock, 1)
        # The claimed approver is ignored: the socket peer's uid is who answered.
        ack = await approve_socket(approve_sock, wire.APPROVAL_ANSWER, wire.ApprovalAnswer(
            id=approval_id, verdict=verdict, by="someone-else"))
        assert ack.kind == wire.APPROVAL_ACK
        return await call

    rig, frames = scenario(tmp_path, body)
    assert frames[0].kind == broker_wire.TOOL_WAITING
    assert frames[-1].kind == broker_wire.TOOL_RESPONSE
    status = frames[-1].body["status"]
    if verdict == "approve":
        assert status == "ok" and len(rig.backend.runs) == 1
        assert verdicts(rig) == [("ask", verdicts(rig)[0][1]), ("allow", f"approved by {LOCAL}")]
    else:
        assert status == "denied" and rig.backend.runs == []
        assert verdicts(rig)[-1] == ("deny", f"denied by {LOCAL}")


def test_an_unanswered_approval_expires_as_a_denial(tmp_path):
    async def body(broker_sock, _approve_sock):
        return await call_tool(broker_sock, request("echo", '{"text": "hi"}'))

    rig, frames = scenario(tmp_path, body, ttl=0.3)
    assert frames[-1].body["status"] == "denied" and "expired" in frames[-1].body["content"]
    assert rig.backend.runs == []
    assert verdicts(rig)[-1][0] == "deny" and "expired unanswered" in verdicts(rig)[-1][1]


def test_an_approver_not_on_the_allowlist_does_not_count(tmp_path):
    async def body(rig, broker_sock, approve_sock):
        call = asyncio.create_task(call_tool(broker_sock, request("echo", '{"text": "hi"}')))
        while not rig.broker.desk.pending():
            await asyncio.sleep(0.01)
        listed = await approve_socket(approve_sock, wire.APPROVAL_LIST, {})
        (pending,) = rig.broker.desk.pending()
        refused = await approve_socket(approve_sock, wire.APPROVAL_ANSWER, wire.ApprovalAnswer(
            id=pending.id, verdict="approve", by=LOCAL))
        return listed, refused, await call

    rig, (listed, refused, frames) = scenario(
        tmp_path, body, approvers=frozenset({"local:0-nobody"}), ttl=0.5, pass_rig=True)
    # Not an approver: neither the pending calls (with their arguments) nor an answer.
    assert listed.kind == wire.ERROR and listed.body["code"] == "denied"
    assert refused.kind == wire.ERROR and refused.body["code"] == "denied"
    assert frames[-1].body["status"] == "denied" and rig.backend.runs == []


def test_a_replayed_id_is_refused(tmp_path):
    async def body(broker_sock, approve_sock):
        call = asyncio.create_task(call_tool(broker_sock, request("echo", '{"text": "hi"}')))
        (approval_id,) = await pending_ids(approve_sock, 1)
        answer = wire.ApprovalAnswer(id=approval_id, verdict="approve", by=LOCAL)
        await approve_socket(approve_sock, wire.APPROVAL_ANSWER, answer)
        frames = await call
        replay = await approve_socket(approve_sock, wire.APPROVAL_ANSWER, answer)
        return frames, replay

    rig, (frames, replay) = scenario(tmp_path, body)
    assert frames[-1].body["status"] == "ok"
    assert replay.kind == wire.ERROR and replay.body["code"] == "unknown_approval"
    assert len(rig.backend.runs) == 1


def test_an_id_approves_its_own_call_and_no_other(tmp_path):
    async def body(broker_sock, approve_sock):
        first = asyncio.create_task(call_tool(broker_sock, request("echo", '{"text": "a"}')))
        (first_id,) = await pending_ids(approve_sock, 1)
        second = asyncio.create_task(
            call_tool(broker_sock, request("echo", '{"text": "b"}', call=2)))
        await pending_ids(approve_sock, 2)
        await approve_socket(approve_sock, wire.APPROVAL_ANSWER, wire.ApprovalAnswer(
            id=first_id, verdict="approve", by=LOCAL))
        return await first, await second

    rig, (first, second) = scenario(tmp_path, body, ttl=0.5)
    assert first[-1].body["status"] == "ok"
    assert second[-1].body["status"] == "denied"  # expired: the first call's id did not reach it
    assert [spec.arguments for spec in rig.backend.runs] == ['{"text": "a"}']


def test_gatewayd_gets_the_request_and_its_answer_counts(tmp_path):
    seen: list[wire.ApprovalRequest] = []
    gateway = tmp_path / "gateway.sock"

    async def gatewayd(reader, writer):
        stream = FrameStream(reader, writer, wire.TO_GATEWAYD)
        request_ = (await stream.read(5)).parse(wire.ApprovalRequest)
        seen.append(request_)
        await stream.write(Frame.of(wire.APPROVAL_ANSWER, wire.ApprovalAnswer(
            id=request_.id, verdict="approve", by="mm-owner-id"), final=True))
        await stream.close()

    async def body(broker_sock, _approve_sock):
        server = await asyncio.start_unix_server(gatewayd, str(gateway))
        try:
            return await call_tool(broker_sock, request("echo", '{"text": "hi"}'))
        finally:
            server.close()

    rig, frames = scenario(tmp_path, body, approvers=frozenset({"mm-owner-id"}), gateway=gateway)
    assert frames[-1].body["status"] == "ok"
    assert seen[0].tool == "echo" and seen[0].arguments == '{"text": "hi"}'
    assert seen[0].grant == "echo" and seen[0].session == "s1"
    assert verdicts(rig)[-1] == ("allow", "approved by mm-owner-id")


def test_a_scheduled_jobs_ask_call_is_listed_for_bxctl_approvals_and_answered_there(tmp_path):
    """A job's run has no Mattermost thread of its own to start from; its approval is listed on
    approve.sock (``bxctl approvals``) with the run's session, and an answer there counts."""
    job_session = "job-morning-notes-20261201-073000-3f9a1c2b"

    async def body(broker_sock, approve_sock):
        call = asyncio.create_task(call_tool(broker_sock, request(
            "echo", '{"text": "morning"}', session=job_session)))
        frame = None
        while frame is None or not frame.parse(wire.ApprovalPending).approvals:
            frame = await approve_socket(approve_sock, wire.APPROVAL_LIST, {})
        (listed,) = frame.parse(wire.ApprovalPending).approvals
        await approve_socket(approve_sock, wire.APPROVAL_ANSWER, wire.ApprovalAnswer(
            id=listed.id, verdict="approve", by="local"))
        return listed, await call

    rig, (listed, frames) = scenario(tmp_path, body)
    assert (listed.session, listed.tool, listed.arguments) == \
        (job_session, "echo", '{"text": "morning"}')
    assert frames[-1].body["status"] == "ok" and len(rig.backend.runs) == 1


# How the owner may change the ask grant while its call waits: each edit, its new lines, and
# whether it changes what the call would do or where it runs (its verdict, grant or sandbox).
EDITS = {
    "a comment": ("# reviewed again\n", False),
    "sessions of another class admitted": ('classes = ["public", "private"]\n', False),
    "untrusted sessions admitted": ("allow_untrusted = true\n", False),
    "replaced by an auto grant": ('mode = "auto"\n', True),
    "replaced by a deny grant": ('mode = "deny"\n', True),
    "its results raised to private": ('result_class = "private"\n', True),
    "its limits changed": ("[sandbox.limits]\ntimeout_s = 5\n", True),
    "given a mount": ("[sandbox]\nmounts = [{ path = \"{tmp}\" }]\n", True),
    "given a host": ('[sandbox]\nhosts = ["127.0.0.1:9"]\n', True),
}
KEYS = ("tools", "mode", "classes", "result_class", "allow_untrusted")


def edited(edits: list[str], tmp: Path) -> str:
    """ASK with ``edits`` applied: a top-level key replaced, a table appended (one [sandbox])."""
    lines = {line.split(" = ")[0]: line + "\n" for line in ASK.splitlines()}
    tables: dict[str, list[str]] = {}
    for edit in edits:
        text = EDITS[edit][0].replace("{tmp}", str(tmp))
        if text.startswith("#"):
            lines["#"] = text
        elif text.startswith("["):
            head, body = text.split("\n", 1)
            tables.setdefault(head, []).append(body)
        else:
            lines[text.split(" = ")[0]] = text
    top = "".join(lines.get(k, "") for k in (*KEYS, "#"))
    return top + "".join(head + "\n" + "".join(bodies) for head, bodies in tables.items())


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.just("deleted"), st.just("renamed"),
                 st.lists(st.sampled_from(sorted(EDITS)), unique=True, max_size=4)))
def test_an_approval_runs_only_as_it_was_asked(edit):
    """The owner changes the grants in any way while a call waits for approval, then approves:
    the call runs, once and as asked, exactly when its grant still decides it so (the same
    verdict, grant and sandbox to the last field); otherwise nothing runs and the audit says
    why (the attack 31i: a call approved under a retired wide grant wrote where a newer grant
    read; 31j's E1: hosts emptied, a class raised or a secret removed were run as asked)."""
    with tempfile.TemporaryDirectory() as top:
        tmp = Path(top)

        async def body(rig, broker_sock, approve_sock):
            call = asyncio.create_task(call_tool(broker_sock, request("echo", '{"text": "hi"}')))
            (approval_id,) = await pending_ids(approve_sock, 1)
            if edit == "deleted":
                (rig.grants / "echo.toml").unlink()
            elif edit == "renamed":
                (rig.grants / "echo.toml").rename(rig.grants / "echo2.toml")
            else:
                write(rig.grants, "echo.toml", edited(edit, tmp))
            await approve_socket(approve_sock, wire.APPROVAL_ANSWER,
                                 wire.ApprovalAnswer(id=approval_id, verdict="approve",
                                                     by="owner"))
            return await call

        rig, frames = scenario(tmp, body, pass_rig=True)
        same = isinstance(edit, list) and not any(EDITS[e][1] for e in edit)
        if same:
            assert frames[-1].body["status"] == "ok" and len(rig.backend.runs) == 1, edit
            assert verdicts(rig)[-1][0] == "allow"
        else:
            assert frames[-1].body["status"] == "denied" and rig.backend.runs == [], edit
            assert "grant decides changed while the owner was asked" in verdicts(rig)[-1][1]
