"""Every allowed memory call has its audited result, whatever memoryd answers (the attack 31h,
B1). memoryd refuses identity edits and asks from a session that is not clean by its own rules,
answering "denied"; policy allowed the call, so brokerd records and answers it as a call that
did not complete ("failed"), with memoryd's words. Before, the result record took only ok or
failed: the append raised, the allowed call had no result until brokerd stopped, and the model
was told of an internal error.

A real ``memoryd serve`` behind a Broker wired as ``brokerd serve`` wires it.
"""

from __future__ import annotations

import json

from brokerd.audit import entries
from brokerd_support import call_tool, make_rig, request, serve
from bxcore.tools import DataClass, ToolResponse
from memory.test_recall_flow import serving

EDITS = [{"action": "replace", "file": "memory.md", "old_text": "tea", "text": "coffee"},
         {"action": "remove", "file": "memory.md", "old_text": "tea"},
         {"action": "consolidate", "file": "memory.md", "plan": []}]
TAINTS = [(DataClass.PRIVATE, False), (DataClass.SECRET, False), (DataClass.PUBLIC, True)]


def test_a_memory_call_memoryd_refuses_is_audited_once_as_failed(tmp_path):
    with serving(tmp_path / "memoryd") as (memory_sock, _home):
        rig = make_rig(tmp_path, memory=memory_sock)
        cases = [(f"s{n}", taint, edit) for n, (taint, edit)
                 in enumerate((t, e) for t in TAINTS for e in EDITS)]
        for session, (data_class, untrusted), _edit in cases:
            rig.broker.taints.record(session, data_class, untrusted)

        async def body(sock):
            return [await call_tool(sock, request("memory", json.dumps(edit), call=1,
                                                  session=session))
                    for session, _taint, edit in cases]

        answers = [frames[-1].parse(ToolResponse) for frames in serve(rig, tmp_path, body)]
    assert [a.status for a in answers] == ["failed"] * len(cases), answers
    assert all("internal" not in a.content for a in answers), answers
    results = [(e.session, e.status) for e in entries(rig.audit_dir) if e.kind == "result"]
    assert sorted(results) == sorted((session, "failed") for session, _t, _e in cases)
