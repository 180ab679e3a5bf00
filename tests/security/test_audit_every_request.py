"""Class 8: every tool request leaves an audit record, also one refused before decide().

Against the real brokerd (bubblewrap backend) over its broker.sock: a frame whose text is not
Unicode (a lone surrogate escape), a frame that is not a tool request, and requests whose
arguments make path resolution fail (a lone surrogate, a NUL) are each answered, each audited
(a ``refused`` record, or a ``deny`` decision), and the chain stays whole. brokerd keeps
serving afterwards.
"""

from __future__ import annotations

import json
import socket

import pytest
from brokerd.audit.log import entries
from bxcore.frames import _PREFIX, Frame, FrameDecoder
from bxcore.protocol import broker as broker_wire

from .laundering_support import chain_ok, scripted_rig, tree_hash

pytestmark = pytest.mark.sandbox


def exchange(path, payload: bytes) -> Frame:
    """Send one raw frame payload (length-prefixed here) and read brokerd's final answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(str(path))
        conn.sendall(_PREFIX.pack(len(payload)) + payload)
        decoder = FrameDecoder(broker_wire.FROM_BROKERD)
        while True:
            data = conn.recv(65536)
            decoder.feed(data)
            while isinstance(frame := decoder.next_event(), Frame):
                if frame.final:
                    return frame
            assert data, "brokerd closed the connection without an answer"


def tool_call(body: dict) -> bytes:
    return json.dumps({"kind": "tool_call", "final": True, "body": body}).encode()


def test_requests_refused_before_a_decision_are_answered_and_audited(short_dir):
    with scripted_rig(short_dir, roles=("memoryd", "brokerd")) as rig:
        stack, home = rig.stack, rig.stack.home
        sock = stack.socket("brokerd")
        before = tree_hash(rig.granted), tree_hash(rig.outside)

        # Text that is not Unicode: the frame cannot be decoded at all.
        surrogate_frame = tool_call({"session": "s1", "call": 1, "tool": "fs.read",
                                     "arguments": "{}"}).replace(b"fs.read", b"fs.read\\ud800")
        assert exchange(sock, surrogate_frame).body["code"] == "bad_frame"
        # A frame that is not a tool request.
        not_request = tool_call({"session": "s2", "call": 2, "tool": "fs.read"})
        assert exchange(sock, not_request).body["code"] == "bad_request"
        # Arguments whose path cannot be resolved on the host.
        for call, path in ((3, "\\ud800/x"), (4, "/x\\u0000y")):
            arguments = '{"path": "' + str(rig.granted) + "/" + path + '"}'
            answer = exchange(sock, tool_call({"session": "s3", "call": call,
                                               "tool": "fs.read", "arguments": arguments}))
            assert answer.kind == "tool_response" and answer.body["status"] == "denied", answer

        records = list(entries(home / "audit"))
        refused = [e for e in records if e.kind == "refused"]
        assert [r.session for r in refused] == [None, "s2"]
        assert "not Unicode" in refused[0].reason and refused[1].request_sha256
        decisions = [e.decision for e in records if e.kind == "decision"]
        assert [(d.session, d.call, d.verdict) for d in decisions] == [
            ("s3", 3, "deny"), ("s3", 4, "deny")]
        assert chain_ok(home)

        # brokerd is still serving: an ordinary read is allowed and runs.
        ok = exchange(sock, tool_call({"session": "s4", "call": 1, "tool": "fs.read",
                                       "arguments": json.dumps({"path": str(rig.granted
                                                                            / "a.txt")})}))
        assert ok.body["content"] == "alpha\n", ok
        assert (tree_hash(rig.granted), tree_hash(rig.outside)) == before
