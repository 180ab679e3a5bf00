"""Issue 31, the fourth attack's B3: a subagent's inherited taint was audited as results of the
parent's delegate call number in the child's session, so the child's own call of that number
had two result records (one per class of the parent's taint, and its own).

Against a real ``brokerd serve`` (bubblewrap): a parent session reads files of some classes,
delegates, and the child (played here as loopd plays it, on the delegate call's connection)
makes calls numbered from 1. The property: every allowing decision of the child has exactly one
result record, the child starts with the parent's taint (its calls' answers are labelled at
least that), and the log verifies (``serving_brokerd``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import broker as broker_wire
from bxcore.protocol import delegate as delegate_wire
from bxcore.tools import ToolRequest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .flow_support import CLASSES, Brokerd, grant_text
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox
WAIT = 300.0  # a guard against a hang, not a speed limit


@pytest.fixture
def rig(request) -> Iterator[tuple[Brokerd, Path]]:
    with serving_brokerd(request, "bubblewrap", "bx-delegate-") as (brokerd, root, _):
        for data_class in CLASSES:
            files = root / data_class
            files.mkdir()
            (files / "f.txt").write_text(f"{data_class} text\n")
            os.chmod(files, 0o755)
            (brokerd.grants / f"{data_class}.toml").write_text(grant_text(
                ["fs.read"], data_class, argument="path",
                allowed=f"paths = {json.dumps([f'{files}/**'])}", mounts=[(files, False)]))
        (brokerd.grants / "d.toml").write_text(grant_text(
            ["delegate"], "public", argument="task", allowed='pattern = "(?s).*"', mounts=[]))
        yield brokerd, root


def test_a_subagents_calls_each_have_one_result(rig):
    brokerd, root = rig
    runs = []

    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
    @given(read=st.lists(st.sampled_from(CLASSES), max_size=3),
           child_calls=st.integers(1, 4))
    @example(read=["private"], child_calls=2)  # the attack's: the delegate call is number 2
    def one(read: list[str], child_calls: int) -> None:
        parent = f"p{len(runs)}"
        for number, data_class in enumerate(read, 1):
            assert brokerd.call(parent, number, "fs.read",
                                {"path": str(root / data_class / "f.txt")}).status == "ok"
        request = ToolRequest(session=parent, call=len(read) + 1, tool="delegate",
                              arguments=json.dumps({"task": "read it"}))
        with SyncFrameSocket.connect(brokerd.socket_path, broker_wire.FROM_BROKERD,
                                     timeout=WAIT) as conn:
            conn.write(Frame.of(broker_wire.TOOL_CALL, request, final=False))
            while (frame := conn.read(timeout=WAIT)).kind != delegate_wire.DELEGATE_RUN:
                assert not frame.final, dict(frame.body)
            child = frame.body["session"]
            for number in range(1, child_calls + 1):
                answer = brokerd.call(child, number, "fs.read",
                                      {"path": str(root / "public" / "f.txt")})
                highest = max(read, key=CLASSES.index, default="public")
                assert CLASSES.index(answer.label.data_class) >= CLASSES.index(highest), answer
            conn.write(Frame.of(delegate_wire.DELEGATE_DONE,
                                delegate_wire.DelegateDone(status="ok", content="done"),
                                final=True))
            while not conn.read(timeout=WAIT).final:
                pass
        runs.append(child)

    one()
    records = brokerd.audit_records()
    for child in runs:
        allowed = Counter(r["decision"]["call"] for r in records if r["kind"] == "decision"
                          and r["decision"]["session"] == child
                          and r["decision"]["verdict"] == "allow")
        results = Counter(r["call"] for r in records if r["kind"] == "result"
                          and r["session"] == child and r["call"] in allowed)
        assert results == allowed and set(allowed.values()) == {1}, (child, allowed, results)
