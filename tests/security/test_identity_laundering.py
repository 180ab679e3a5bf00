"""Class 5: secret or private data laundered through identity memory into a clean session.

Identity (memory.md, user.md) is in every session's prompt. The invariant: no data reaches a
session whose taint does not reflect its class. Identity takes edits only from sessions at or
below ``[memory] identity_ceiling`` (default public: ordinary sessions stay clean, so public-only
grants keep working); a higher session's ``add`` becomes a note of its class; brokerd starts
every session at the ceiling; an entry that leaves identity keeps the class it was written at.
Run against the real memoryd, brokerd (bubblewrap) and loopd with an obedient model.
"""

from __future__ import annotations

import pytest
from bxcore.tools import DataClass
from memoryd.layout import Layout
from memoryd.notes import read_notes
from memoryd.writer import Caller, MemoryWriter

from .laundering_support import (
    Page,
    audited,
    chain_ok,
    directive,
    grant,
    scripted_rig,
    tool_results,
    tree_hash,
    via_call_tool,
)

pytestmark = pytest.mark.sandbox
KEY = "KEY-7c1e-secret"


def vault_grant(vault) -> str:
    return grant(["fs.read"], "auto", "secret", argument=("path", "paths", f"{vault}/**"),
                 sandbox=f'mounts = [{{ path = "{vault}" }}]',
                 classes=("public", "private", "secret"))


def add(text: str) -> tuple[str, dict]:
    return via_call_tool("memory", {"action": "add", "file": "memory.md", "text": text})


def test_a_secret_session_cannot_put_its_data_into_identity_and_a_clean_one_stays_usable(
        short_dir):
    page = Page("a public page")
    vault = short_dir / "vault"
    vault.mkdir()
    (vault / "key.txt").write_text(KEY)
    grants = {"vault.toml": vault_grant(vault), "fetch.toml": page.grant()}
    try:
        with scripted_rig(short_dir, grants=grants) as rig:
            stack, home = rig.stack, rig.stack.home
            before = tree_hash(vault), tree_hash(rig.granted)
            read_key = via_call_tool("fs.read", {"path": str(vault / "key.txt")})
            stack.turn("holder", directive(read_key, add(f"The key is {KEY}")), resume=False)
            _read, added = tool_results(home, "holder")
            assert "recorded as note" in added["content"], added
            assert KEY not in (home / "memory" / "memory.md").read_text() \
                if (home / "memory" / "memory.md").exists() else True
            (note,) = [n for n in read_notes(home / "memory" / "notes.md") if KEY in n.text]
            assert note.data_class == DataClass.SECRET and note.session == "holder"

            # A private session's add is a private note too (the ceiling is public).
            read_private = via_call_tool("fs.read", {"path": str(rig.granted / "a.txt")})
            stack.turn("private", directive(read_private, add("alpha is private")),
                       resume=False)
            assert "recorded as note" in tool_results(home, "private")[1]["content"]

            # An ordinary new session is clean: the public-only auto grant works, and what it
            # sends out holds nothing of the key.
            stack.turn("fresh", directive(via_call_tool("http.fetch", {"url": page.url()})),
                       resume=False)
            (fetched,) = tool_results(home, "fresh")
            assert fetched["content"].endswith("a public page"), fetched
            assert page.asked == ["/p"] and not any(KEY in p for p in page.asked)
            assert [v for v, _ in audited(home, "http.fetch")] == ["allow"]
            assert chain_ok(home)
            assert (tree_hash(vault), tree_hash(rig.granted)) == before
            assert KEY not in str(rig.model.bodies[-1])  # the fresh session's prompt
    finally:
        page.close()


def test_with_a_private_ceiling_every_session_starts_private(short_dir):
    """The owner lets identity hold private data: then no session is clean, and a public-only
    grant is refused even in a session that has read nothing (and the refusal is audited)."""
    page = Page("a public page")
    extra = '\n[memory]\nidentity_ceiling = "private"\n'
    try:
        with scripted_rig(short_dir, grants={"fetch.toml": page.grant()},
                          extra_config=extra) as rig:
            stack, home = rig.stack, rig.stack.home
            read_private = via_call_tool("fs.read", {"path": str(rig.granted / "a.txt")})
            stack.turn("writer", directive(read_private, add("The dentist is Dr Alpha.")),
                       resume=False)
            assert "updated" in tool_results(home, "writer")[1]["content"]
            assert "Dr Alpha" in (home / "memory" / "memory.md").read_text()

            stack.turn("fresh", directive(via_call_tool("http.fetch", {"url": page.url()})),
                       resume=False)
            (refused,) = tool_results(home, "fresh")
            assert refused["content"].startswith("Denied") and "private data" in \
                refused["content"], refused
            assert page.asked == []
            assert audited(home, "http.fetch")[-1][0] == "deny"
            assert chain_ok(home)
    finally:
        page.close()


def test_an_entry_moved_out_of_identity_keeps_the_class_it_was_written_at(tmp_path):
    """consolidate ... moved by a public session files a private entry as private, not as the
    consolidating session's class (the journal knows which edit brought the entry in)."""
    layout = Layout(tmp_path)
    layout.ensure()
    writer = MemoryWriter(layout, stage_identity_writes=False, identity_ceiling=DataClass.PRIVATE)
    from memoryd.arguments import AddArgs, ConsolidateArgs
    writer.write(AddArgs(action="add", file="memory.md", text="private fact"),
                 Caller(session="p", data_class=DataClass.PRIVATE, untrusted=False))
    writer.write(AddArgs(action="add", file="memory.md", text="public fact"),
                 Caller(session="q", data_class=DataClass.PUBLIC, untrusted=False))
    plan = ConsolidateArgs.model_validate({"action": "consolidate", "file": "memory.md", "plan": [
        {"entry": 0, "fate": "moved"}, {"entry": 1, "fate": "moved"}]})
    writer.write(plan, Caller(session="c", data_class=DataClass.PUBLIC, untrusted=False))
    moved = {n.text: n.data_class for n in read_notes(layout.notes) if n.kind == "moved"}
    assert moved == {"private fact": DataClass.PRIVATE, "public fact": DataClass.PUBLIC}


def test_an_entry_written_by_hand_leaves_identity_as_private(tmp_path):
    layout = Layout(tmp_path)
    layout.ensure()
    layout.identity("user.md").write_text("The owner's address is 1 Main St.\n")
    writer = MemoryWriter(layout, stage_identity_writes=False)
    from memoryd.arguments import ConsolidateArgs
    plan = ConsolidateArgs.model_validate({"action": "consolidate", "file": "user.md",
                                           "plan": [{"entry": 0, "fate": "moved"}]})
    writer.write(plan, Caller(session="c", data_class=DataClass.PUBLIC, untrusted=False))
    (note,) = read_notes(layout.notes)
    assert note.data_class == DataClass.PRIVATE
