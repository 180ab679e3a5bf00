"""An answer that depends on mount labels raises its session to them (docs/decisions/
label-dependent-answers.md), through the real Broker, its audit log and its taint store (the
sandbox scripted): the denial of an egress grant whose mount a secret session raised, whatever
the verdict it comes to; the record says what it consulted; ``taint rebuild`` and the start-up
reconcile give the same taint; an answer that depends on the grants and the session's own taint
alone raises nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from brokerd.audit import entries, taint_marks, verify
from brokerd.beneath import resolve_beneath
from brokerd.labels import PLAIN, Label
from brokerd.labelstore import LabelStore
from brokerd.policy import CallArguments, decide, parse_grant
from brokerd.taint import CLEAN, TaintStore, rebuild
from brokerd_support import NOW, call_tool, make_rig, request, serve, write
from bxcore.tools import DataClass, ToolResponse


def egress_grant(mount):
    return ('tools = ["shell.run"]\nmode = "auto"\nclasses = ["public"]\n'
            'result_class = "public"\nallow_untrusted = true\n'
            f'[sandbox]\nmounts = [{{ path = {json.dumps(str(mount))}, write = false }}]\n'
            'hosts = ["example.org"]\n')


def labelled_rig(tmp_path, data_class, **options):
    """A rig whose mount ``notes`` carries ``data_class``: the line a secret (or private)
    session's writing call leaves in labels.jsonl, read by the rig's LabelStore at start."""
    mount = tmp_path / "notes"
    mount.mkdir()
    labels = tmp_path / "home" / "broker" / "labels.jsonl"
    labels.parent.mkdir(parents=True)
    labels.write_text(json.dumps({"path": str(mount.resolve()), "class": data_class,
                                  "untrusted": False, "session": "secret-one", "call": 1}) + "\n")
    rig = make_rig(tmp_path, **options)
    assert LabelStore(labels).labels()[str(mount.resolve())].data_class.value == data_class
    write(rig.grants, "post.toml", egress_grant(mount))
    return rig


@pytest.mark.parametrize("data_class", ["public", "private", "secret"])
def test_a_denial_for_a_label_raises_the_session_and_says_so(tmp_path, data_class):
    rig = labelled_rig(tmp_path, data_class)
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("shell.run", '{"argv": []}')))
    answer = frames[-1].parse(ToolResponse)
    decision = next(e for e in entries(rig.audit_dir) if e.kind == "decision")
    if data_class == "public":  # it ran: what it learned is that the label is public
        assert answer.status == "ok" and decision.consulted is None
        return
    assert answer.status == "denied" and answer.data_class.value == data_class, answer
    assert f"this answer depends on mount labels, {data_class}" in answer.content
    assert decision.consulted is not None and decision.consulted.data_class.value == data_class
    live = TaintStore(rig.taint_dir).get("s1")
    assert max(live.classes).value == data_class
    out = TaintStore(tmp_path / "rebuilt")
    rebuild(taint_marks(entries(rig.audit_dir)), out)
    assert out.path("s1").read_bytes() == TaintStore(rig.taint_dir).path("s1").read_bytes()
    assert verify(rig.audit_dir)[0] == []


def test_a_denial_by_the_sessions_own_taint_raises_nothing(tmp_path):
    rig = labelled_rig(tmp_path, "public")
    TaintStore(rig.taint_dir).record("s1", DataClass.PRIVATE, False)
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("shell.run", '{"argv": []}')))
    answer = frames[-1].parse(ToolResponse)
    assert answer.status == "denied" and "the session has seen private" in answer.content
    assert answer.data_class.value == "public"  # the grant's text and its own taint only
    assert all(e.consulted is None for e in entries(rig.audit_dir) if e.kind == "decision")


def test_an_ask_that_depended_on_labels_raises_the_session_when_it_is_asked(tmp_path):
    """An egress grant missed for its mount's label, so an ask grant decides: the ask itself
    tells the session the label was high (it would have run unasked otherwise)."""
    rig = labelled_rig(tmp_path, "secret", ttl=0.2)  # nobody answers: the ask expires
    write(rig.grants, "asked.toml", 'tools = ["shell.run"]\nmode = "ask"\n'
          'classes = ["public", "private", "secret"]\nresult_class = "public"\n')
    frames = serve(rig, tmp_path, lambda s: call_tool(s, request("shell.run", '{"argv": []}')))
    answer = frames[-1].parse(ToolResponse)
    asked = [e for e in entries(rig.audit_dir) if e.kind == "decision"]
    assert asked[0].decision.verdict == "ask" and asked[0].consulted is not None
    assert asked[0].consulted.data_class is DataClass.SECRET
    assert answer.status == "denied" and answer.data_class is DataClass.SECRET, answer
    assert DataClass.SECRET in TaintStore(rig.taint_dir).get("s1").classes



def notes_grant():
    """A public fs.read of /notes/**, its mount /notes."""
    return parse_grant('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public"]\n'
                       'result_class = "public"\n[arguments.path]\npaths = ["/notes/**"]\n'
                       '[sandbox]\nmounts = [{ path = "/notes" }]\n', "notes.toml",
                       home=Path("/home/o"), resolve=lambda p: p)


@pytest.mark.parametrize(("given", "resolved", "consults"), [
    ("/lab/link/x", "/elsewhere/x", True),  # through a labelled root: a symlink there decided
    ("/elsewhere/x", "/lab/x", True),  # to one
    ("/elsewhere/x", "/elsewhere/x", False),  # nowhere near one
    ("/lab", "/lab", True),
    ("/", "/", False),  # above a labelled root: its content decides nothing
])
def test_a_path_argument_consults_the_labels_of_the_roots_it_resolves_through(
        given, resolved, consults):
    notes = notes_grant()
    req = request("fs.read", json.dumps({"path": given}))
    decision = decide(req, (notes,), arguments=CallArguments.parse(req.arguments), now=NOW,
                      taint=CLEAN, secrets={}, resolved_paths={"path": resolved},
                      labels={"/lab": Label(DataClass.SECRET, False)})
    assert decision.record.verdict == "deny"
    assert decision.consulted == (Label(DataClass.SECRET, False) if consults else PLAIN)


def test_a_symlink_met_half_way_is_consulted_too(tmp_path):
    """A path in an unlabelled tree leads, by a symlink, into a labelled one, where a second
    symlink (which a secret session could have written) decides where it ends: that root's
    label is consulted, though neither the path given nor the one it resolves to is in it."""
    plain, labelled, end = (tmp_path / name for name in ("plain", "labelled", "end"))
    for directory in (plain, labelled, end):
        directory.mkdir()
    (labelled / "hop").symlink_to(end / "x")
    (plain / "start").symlink_to(labelled / "hop")
    given = str(plain / "start")
    walk = resolve_beneath(given, [(str(tmp_path), str(tmp_path))])
    steps = walk.read
    assert str(labelled / "hop") in steps and walk.path == str(end / "x")
    notes = notes_grant()
    req = request("fs.read", json.dumps({"path": given}))
    decision = decide(req, (notes,), arguments=CallArguments.parse(req.arguments), now=NOW,
                      taint=CLEAN, secrets={}, resolved_paths={"path": str(end / "x")},
                      labels={str(labelled): Label(DataClass.SECRET, False)},
                      lookups={"path": steps})
    assert decision.consulted == Label(DataClass.SECRET, False)
