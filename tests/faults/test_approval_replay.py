"""A used approval id replayed through approve.sock: brokerd refuses it, and it approves nothing
else. The first answer runs the call it was issued for; the same id sent again (as a hostile
local process that saw it could) is refused with an error saying it was already used, and
brokerd logs the refusal; while another call waits for its own approval, the old id does not
let it run.
"""

from __future__ import annotations

import threading
import time

import pytest
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import approval as wire
from support.sandbox_uid import writable_by_sandbox

from .rig import directive, grant, scripted_rig, tool_results, via_call_tool

pytestmark = pytest.mark.sandbox
WAIT = 60.0  # a bound on waiting for brokerd to open the approval, not a speed check


def exchange(stack, frame: Frame) -> Frame:
    with SyncFrameSocket.connect(stack.root / "run" / "approve.sock",
                                 wire.FROM_APPROVE_SOCKET) as conn:
        conn.write(frame)
        return conn.read(timeout=30)


def pending(stack) -> list[wire.ApprovalRequest]:
    reply = exchange(stack, Frame(kind=wire.APPROVAL_LIST, final=False, body={}))
    return reply.parse(wire.ApprovalPending).approvals


def answer(stack, approval_id: str, verdict: str = "approve") -> Frame:
    body = wire.ApprovalAnswer(id=approval_id, verdict=verdict, by="local")
    return exchange(stack, Frame.of(wire.APPROVAL_ANSWER, body, final=False))


def wait_for_approval(stack, session: str) -> wire.ApprovalRequest:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = [a for a in pending(stack) if a.session == session]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no approval opened for {session}")


def turn_in_background(stack, session: str, content: str) -> tuple[threading.Thread, list]:
    frames: list = []
    worker = threading.Thread(target=lambda: frames.extend(
        stack.turn(session, content, resume=False)))
    worker.start()
    return worker, frames


def test_a_replayed_approval_id_is_refused_and_approves_nothing(short_dir):
    inbox = short_dir / "inbox"
    inbox.mkdir()
    writable_by_sandbox(inbox)
    inbox_grant = grant(["fs.write"], "ask", "private", argument=("path", "paths", f"{inbox}/**"),
                        sandbox=f'mounts = [{{ path = "{inbox}", write = true }}]')
    with scripted_rig(short_dir, grants={"inbox.toml": inbox_grant},
                      approval_timeout=20) as rig:
        stack = rig.stack

        def write(name: str) -> str:
            return directive(via_call_tool("fs.write", {"path": str(inbox / name),
                                                        "content": name}))

        worker, frames = turn_in_background(stack, "first", write("one.txt"))
        first = wait_for_approval(stack, "first")
        ack = answer(stack, first.id)
        assert ack.kind == wire.APPROVAL_ACK, ack
        worker.join(timeout=WAIT)
        assert frames and frames[-1].kind == "turn_done", frames
        assert (inbox / "one.txt").read_text() == "one.txt"

        replayed = answer(stack, first.id)
        assert replayed.kind == wire.ERROR and "already used" in replayed.body["message"], replayed

        worker, frames = turn_in_background(stack, "second", write("two.txt"))
        second = wait_for_approval(stack, "second")
        assert second.id != first.id
        replayed = answer(stack, first.id)
        assert replayed.kind == wire.ERROR, replayed
        assert [a.id for a in pending(stack)] == [second.id]  # still waiting for its own answer
        assert answer(stack, second.id, "deny").kind == wire.APPROVAL_ACK
        worker.join(timeout=WAIT)
        (denied,) = tool_results(stack.home, "second")
        assert denied["content"].startswith("Denied"), denied
        assert not (inbox / "two.txt").exists()
        assert stack.log("brokerd").count("already used") == 2  # each refusal is logged
