"""Who answered on approve.sock: the socket peer's uid, checked against ``[broker] approvers``.

In a user namespace that maps only its own root (brokerd in rootless podman) every other uid is
the overflow uid, which names nobody: ``local:<overflow>`` never admits it. ``local:socket``
admits any peer that could open the socket, and the audit log says so, with the uid seen.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from brokerd.approvals import ApprovalBook, local_approver
from brokerd.audit import entries
from brokerd.errors import NotAnApprover
from brokerd_support import ASK, approve_socket, call_tool, make_rig, request, write
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.peers import DEFAULT_OVERFLOW_UID, overflow_uid
from bxcore.protocol import approval as wire
from support.brokerd import start
from support.requires import user_namespaces

OVERFLOW = 65534
MM = "8xq3mattermostuserid0000aa"

# --- the check, pure: one row per rule ------------------------------------------------------


@pytest.mark.parametrize(
    ("uid", "approvers", "by"),
    [
        (1000, {"local:1000"}, "local:1000"),  # a real uid, listed: as before
        (1000, {"local:1000", "local:socket"}, "local:1000"),  # the named entry wins
        (1000, {"local:socket"}, "local:socket(uid 1000)"),
        (OVERFLOW, {"local:socket"}, f"local:socket(uid {OVERFLOW})"),
        (OVERFLOW, {f"local:{OVERFLOW}", "local:socket"}, f"local:socket(uid {OVERFLOW})"),
    ],
)
def test_who_answered(uid, approvers, by):
    assert local_approver(uid, frozenset(approvers), OVERFLOW) == by


@pytest.mark.parametrize(
    ("uid", "approvers", "says"),
    [
        (1001, {"local:1000", MM}, "local:1001 is not on the owner's list"),
        (OVERFLOW, {f"local:{OVERFLOW}"}, "overflow uid"),  # listed, still refused
        (OVERFLOW, {"local:1000"}, "overflow uid"),
        (OVERFLOW, set(), "overflow uid"),
    ],
)
def test_who_is_refused(uid, approvers, says):
    with pytest.raises(NotAnApprover, match=says) as refused:
        local_approver(uid, frozenset(approvers), OVERFLOW)
    if uid == OVERFLOW:
        assert '"local:socket"' in str(refused.value) and "directory" in str(refused.value)


def test_the_overflow_uid_is_the_kernels_or_its_default(tmp_path):
    written = tmp_path / "overflowuid"
    written.write_text("4242\n", encoding="ascii")
    assert overflow_uid(written) == 4242
    written.write_text("garbage", encoding="ascii")
    assert overflow_uid(written) == DEFAULT_OVERFLOW_UID
    assert overflow_uid(tmp_path / "missing") == DEFAULT_OVERFLOW_UID


@pytest.mark.parametrize(
    ("by", "approvers", "counts"),
    [
        (f"local:socket(uid {OVERFLOW})", {"local:socket"}, True),
        (f"local:socket(uid {OVERFLOW})", {f"local:{OVERFLOW}"}, False),
        ("local:socket", {"local:1000"}, False),
        (MM, {MM, "local:socket"}, True),
    ],
)
def test_the_book_counts_a_socket_answer_only_when_local_socket_is_listed(by, approvers, counts):
    assert ApprovalBook(frozenset(approvers), timedelta(seconds=60)).counts(by) is counts


# --- gatewayd cannot speak for a local approver ---------------------------------------------


def test_gatewayd_relaying_a_local_approver_does_not_count(tmp_path):
    gateway = tmp_path / "gateway.sock"
    rig = make_rig(tmp_path, approvers=frozenset({"local:socket"}), ttl=0.5, gateway=gateway)
    write(rig.grants, "echo.toml", ASK)

    async def gatewayd(reader, writer):
        stream = FrameStream(reader, writer, wire.TO_GATEWAYD)
        approval = (await stream.read(5)).parse(wire.ApprovalRequest)
        forged = wire.ApprovalAnswer(id=approval.id, verdict="approve", by="local:socket(uid 0)")
        await stream.write(Frame.of(wire.APPROVAL_ANSWER, forged, final=True))
        await stream.close()

    async def main():
        server = await asyncio.start_unix_server(gatewayd, str(gateway))
        servers = await start(rig.broker, tmp_path / "broker.sock", tmp_path / "approve.sock")
        try:
            return await call_tool(tmp_path / "broker.sock", request("echo", '{"text": "hi"}'))
        finally:
            for each in (server, *servers):
                each.close()

    frames = asyncio.run(main())
    assert frames[-1].body["status"] == "denied" and "expired" in frames[-1].body["content"]
    assert rig.backend.runs == []


# --- real sockets, brokerd in a user namespace that maps nobody ------------------------------


needs_userns = pytest.mark.skipif(
    not user_namespaces(), reason="needs unshare --user (unprivileged user namespaces)"
)
SERVER = Path(__file__).with_name("overflow_server.py")


async def _in_userns(directory: Path, ttl: float, approvers: list[str], body):
    """Run brokerd's sockets under ``unshare --user`` and ``body(broker_sock, approve_sock)``
    against them from here."""
    write(directory / "grants", "echo.toml", ASK)
    command = ["unshare", "--user", "--", sys.executable, str(SERVER), str(directory), str(ttl)]
    server = await asyncio.create_subprocess_exec(
        *command, *approvers, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        ready = (await asyncio.wait_for(server.stdout.readline(), 120)).split()
        assert ready[:1] == [b"ready"], ready
        assert int(ready[1]) == overflow_uid()  # inside, even its own uid is unmapped
        return await body(directory / "broker.sock", directory / "approve.sock")
    finally:
        server.stdin.close()
        await server.wait()


async def _asked_id(audit: Path) -> str:
    """The pending approval's id, from the audit log (a peer that is not an approver may not
    list pending calls on approve.sock)."""
    while True:
        asked = [e.approval for e in entries(audit) if e.kind == "decision" and e.approval]
        if asked:
            return asked[0]
        await asyncio.sleep(0.01)


def _ask_and_answer(tmp_path: Path, ttl: float, approvers: list[str]):
    async def body(broker_sock, approve_sock):
        call = asyncio.create_task(call_tool(broker_sock, request("echo", '{"text": "hi"}')))
        approval_id = await _asked_id(tmp_path / "home" / "audit")
        listed = await approve_socket(approve_sock, wire.APPROVAL_LIST, {})
        answer = wire.ApprovalAnswer(id=approval_id, verdict="approve", by="local:1000")
        reply = await approve_socket(approve_sock, wire.APPROVAL_ANSWER, answer)
        return listed, reply, await call

    listed, reply, frames = asyncio.run(_in_userns(tmp_path, ttl, approvers, body))
    decisions = [e for e in entries(tmp_path / "home" / "audit") if e.kind == "decision"]
    return listed, reply, frames, decisions


@needs_userns
def test_in_a_user_namespace_local_overflow_admits_nobody(tmp_path):
    seen = overflow_uid()
    listed, reply, frames, decisions = _ask_and_answer(tmp_path, 1.0, [f"local:{seen}"])
    assert listed.kind == wire.ERROR and listed.body["code"] == "denied"  # not even the list
    assert reply.kind == wire.ERROR and reply.body["code"] == "denied"
    assert f"overflow uid {seen}" in reply.body["message"]
    assert '"local:socket"' in reply.body["message"]
    assert frames[-1].body["status"] == "denied" and "expired" in frames[-1].body["content"]
    assert [d.by for d in decisions] == [None, None]


@needs_userns
def test_in_a_user_namespace_local_socket_admits_the_peer_and_says_how(tmp_path):
    seen = overflow_uid()
    listed, reply, frames, decisions = _ask_and_answer(tmp_path, 30.0, ["local:socket", MM])
    assert len(listed.parse(wire.ApprovalPending).approvals) == 1
    assert reply.kind == wire.APPROVAL_ACK
    assert frames[-1].body["status"] == "ok"
    settled = decisions[-1]
    assert settled.by == f"local:socket(uid {seen})"
    assert settled.decision.verdict == "allow"
    assert settled.decision.reason == f"approved by local:socket(uid {seen})"
