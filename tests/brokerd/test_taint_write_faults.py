"""A decision whose consulted-label raise cannot be written (a full disk) leaves no allowed call
without its one result, and no ask open (brokerd.calls); the session's next call waits for the
owed taint and runs, with no restart, once the disk takes it. Through the real Broker, its
audit log and taint store (the sandbox scripted), the taint write failing as on a full disk.
tests/security/test_full_disk_classes.py does it on a real full filesystem."""

from __future__ import annotations

import errno
import json
import os

import pytest
from brokerd import taint as taint_module
from brokerd.audit import entries, verify
from brokerd_support import call_tool, request, serve, write
from bxcore.tools import DataClass, ToolResponse
from test_label_answers import labelled_rig

REAL = taint_module.write_durably


def full(path, data, mode=0o600):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def read_grant(mount, mode):
    return (f'tools = ["fs.read"]\nmode = "{mode}"\nclasses = ["public", "private", "secret"]\n'
            f'result_class = "public"\n[arguments.path]\npaths = ["{mount}/**"]\n'
            f'[sandbox]\nmounts = [{{ path = {json.dumps(str(mount))} }}]\n')


@pytest.mark.parametrize("mode", ["auto", "ask"])
def test_a_consulted_raise_that_cannot_be_written_closes_the_call_and_the_next_runs(
        tmp_path, monkeypatch, mode):
    rig = labelled_rig(tmp_path, "secret", ttl=0.2)
    mount = (tmp_path / "notes").resolve()
    (mount / "a.txt").write_text("alpha\n")
    write(rig.grants, "read.toml", read_grant(mount, mode))
    arguments = json.dumps({"path": str(mount / "a.txt")})
    monkeypatch.setattr(taint_module, "write_durably", full)

    async def both(sock):
        first = await call_tool(sock, request("fs.read", arguments, call=1))
        ran.append(len(rig.backend.runs))
        monkeypatch.setattr(taint_module, "write_durably", REAL)  # the disk has room again
        second = await call_tool(sock, request("fs.read", arguments, call=2))
        return first, second

    ran: list[int] = []
    first, second = serve(rig, tmp_path, both)
    # Whether the raise was needed depends on the labels consulted: the answer carries them,
    # so the caller's view of the session rises too (an error frame has no label).
    told = first[-1].parse(ToolResponse)
    assert told.status == "failed" and "No space left on device" in told.content, first
    assert told.data_class is DataClass.SECRET
    records = list(entries(rig.audit_dir))
    call1 = [e for e in records if getattr(e, "call", None) == 1 or
             (e.kind == "decision" and e.decision.call == 1)]
    if mode == "auto":  # allowed, not run, closed by one failed result labelled secret
        assert [e.kind for e in call1] == ["decision", "result"], call1
        assert call1[1].status == "failed" and call1[1].data_class is DataClass.SECRET
    else:  # the ask is settled denied before anyone is asked
        assert [(e.kind, e.decision.verdict) for e in call1] == [("decision", "ask"),
                                                                ("decision", "deny")]
        assert rig.book.pending(rig.broker._clock()) == []
    assert ran == [0]  # call 1 never reached the sandbox
    assert rig.broker.audit.open_calls() == []
    # The owed taint is written before the next call, which then goes on.
    answer = second[-1]
    assert answer.kind == "tool_response", answer
    assert answer.parse(ToolResponse).data_class is DataClass.SECRET
    assert DataClass.SECRET in taint_module.TaintStore(rig.taint_dir).get("s1").classes
    assert not rig.broker.taints.owed("s1")
    assert verify(rig.audit_dir)[0] == []


def test_the_start_up_reconcile_removes_a_taint_write_a_crash_cut(tmp_path):
    """SIGKILL between write_durably's write and its rename leaves ``.<session>.json.tmp``; the
    reconcile at start removes it and leaves the taint files as the audit log says (the crash
    trials found the leftover beside a whole file)."""
    store = taint_module.TaintStore(tmp_path / "sessions")
    store.record("s1", DataClass.PRIVATE, False)
    whole = store.path("s1").read_bytes()
    cut = store.path("s1").with_name(".s1.json.tmp")
    cut.write_bytes(b'{"classes":["sec')
    raised = taint_module.reconcile([("s1", DataClass.PRIVATE, False)], store)
    assert raised == [] and not cut.exists()
    assert sorted(p.name for p in store.directory.iterdir()) == ["s1.json"]
    assert store.path("s1").read_bytes() == whole
