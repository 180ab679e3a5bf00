"""The attack 31j's E14: an ask is decided again when the owner approves it, and that second
decision reads the labels of the mounts it reaches (a call with egress may not hold what is
over its grant's classes). A secret session wrote one of them while the owner was asked, so
the second decision refused the call; its answer was labelled public and the asking session's
taint stayed public: one bit of whether a secret session wrote there, per approval. Now the
answer is labelled with what the second decision read, and the session's taint rises to it;
with nothing written there, the approved call runs (the control). A real ``brokerd serve`` as
root, bubblewrap."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerd_support import approve_socket, pending_ids
from bxcore.protocol import approval as approval_wire
from bxcore.taint import read_taint
from bxcore.tools import DataClass
from security.label_rig import LabelRig

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(os.geteuid() != 0, reason="the rig's approver is root")]


@pytest.fixture
def rig() -> Iterator[LabelRig]:
    top = Path(tempfile.mkdtemp(prefix="bx-ask-labels-"))
    try:
        yield LabelRig(top, unprivileged=False,
                       backend=f'approvers = ["local:{os.geteuid()}"]\n')
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("written", [False, True], ids=["nothing written", "a secret written"])
def test_an_approvals_second_decision_labels_its_answer_and_the_session(rig, written):
    shared, other = rig.directory("shared"), rig.directory("other")
    (rig.top / "grants" / "post.toml").write_text(
        'tools = ["shell.run"]\nmode = "ask"\nclasses = ["public"]\nresult_class = "public"\n'
        f'allow_untrusted = true\n[arguments.cwd]\npaths = ["{other}"]\n[sandbox]\n'
        f'mounts = [{{ path = "{other}", write = false }}, '
        f'{{ path = "{shared}", write = false }}]\n'
        'hosts = ["127.0.0.1:9"]\n')
    rig.grant("secw", tools=["shell.run"], result_class="secret", mounts=[(shared, True)],
              argument=("cwd", str(shared)))
    approve_sock = rig.top / "run" / "approve.sock"
    with rig:
        asking = rig.begin("pub", "shell.run", {"argv": ["true"], "cwd": str(other)})
        (ident,) = asyncio.run(pending_ids(approve_sock, 1))
        if written:
            assert rig.shell("sec", "echo x > s.txt", shared).status == "ok"
        asyncio.run(approve_socket(approve_sock, approval_wire.APPROVAL_ANSWER,
                                   approval_wire.ApprovalAnswer(id=ident, verdict="approve",
                                                                by="owner")))
        answer = rig.end(asking)
    taint = read_taint(rig.home / "broker" / "sessions", "pub")
    if not written:
        assert answer.status == "ok" and answer.data_class == "public", answer
        return
    assert answer.status == "denied" and answer.data_class == "secret", answer
    assert taint.highest == DataClass.SECRET, taint  # the session's taint rose with it
