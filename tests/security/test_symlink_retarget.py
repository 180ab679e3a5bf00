"""Class 7: grants re-targeted by symlinks at reload.

Grant paths are resolved when grants load. A tool with a writable mount could replace a
directory inside it with a symlink, and the next reload would point any grant resolving
through that directory somewhere else. brokerd refuses such a grant at load, loudly, naming
both grants; the attack (shell.run plants the symlink, the grants directory changes, the
re-targeted read is tried) then meets no grant. Real brokerd (bubblewrap), loopd, memoryd.
"""

from __future__ import annotations

import subprocess

import pytest
from brokerd.grantstore import load_grants
from faults.stack import BIN

from .laundering_support import (
    audited,
    chain_ok,
    directive,
    grant,
    scripted_rig,
    tool_results,
    tree_hash,
    via_call_tool,
    writable_by_tools,
)

pytestmark = pytest.mark.sandbox
CANARY = "CANARY-retarget-51d0"


def shell_grant(work) -> str:
    return grant(["shell.run"], "auto", "private", argument=("cwd", "paths", f"{work}/**"),
                 sandbox=f'mounts = [{{ path = "{work}", write = true }}]')


def sub_grant(work) -> str:
    return grant(["fs.read"], "auto", "private", argument=("path", "paths", f"{work}/sub/**"),
                 sandbox=f'mounts = [{{ path = "{work}/sub" }}]')


def test_a_grant_resolving_through_another_grants_writable_mount_is_refused(tmp_path):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    grants = tmp_path / "grants"
    grants.mkdir()
    (grants / "shell.toml").write_text(shell_grant(work))
    (grants / "sub.toml").write_text(sub_grant(work))
    (grants / "top.toml").write_text(grant(["fs.read"], "auto", "private",
                                           argument=("path", "paths", f"{work}/**"), sandbox=""))
    loaded = load_grants(grants)
    assert sorted(g.name for g in loaded.grants) == ["shell", "top"]
    (error,) = loaded.errors
    assert "sub.toml" in str(error) and "grant shell" in str(error) and "symlink" in str(error)
    checked = subprocess.run([str(BIN / "brokerd"), "grants", "check", "--dir", str(grants)],
                             capture_output=True, text=True)
    assert "sub.toml" in checked.stdout + checked.stderr


def test_a_planted_symlink_does_not_re_target_a_grant_at_reload(short_dir):
    with scripted_rig(short_dir) as rig:
        stack, home = rig.stack, rig.stack.home
        work = writable_by_tools(short_dir / "work")
        (work / "sub").mkdir()
        (work / "sub" / "x.txt").write_text("in sub\n")
        (rig.outside / "secret.txt").write_text(CANARY)
        (stack.grants / "shell.toml").write_text(shell_grant(work))
        (stack.grants / "sub.toml").write_text(sub_grant(work))
        before = tree_hash(rig.outside)

        plant = via_call_tool("shell.run", {"cwd": str(work), "argv": [
            "sh", "-c", f"mv sub sub.old && ln -s {rig.outside} sub"]})
        stack.turn("plant", directive(plant), resume=False)
        assert (work / "sub").is_symlink(), tool_results(home, "plant")
        (stack.grants / "README").write_text("the owner edits the grants directory\n")

        steal = via_call_tool("fs.read", {"path": str(work / "sub" / "secret.txt")})
        stack.turn("steal", directive(steal), resume=False)
        (result,) = tool_results(home, "steal")
        assert result["content"].startswith("Denied"), result
        assert CANARY not in result["content"] and CANARY not in str(rig.model.bodies)
        assert audited(home, "fs.read")[-1][0] == "deny"
        assert "sub.toml" in stack.log("brokerd") and "symlink" in stack.log("brokerd")
        assert chain_ok(home) and tree_hash(rig.outside) == before
