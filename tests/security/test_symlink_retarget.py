"""Class 7: grants re-targeted by symlinks at reload.

Grant paths are resolved when grants load. A tool with a writable mount could replace a
directory inside it with a symlink, and the next reload would point any grant resolving
through that directory somewhere else. brokerd refuses such a grant at load, loudly, naming
both grants; the attack (shell.run plants the symlink, the grants directory changes, the
re-targeted read is tried) then meets no grant. Real brokerd (bubblewrap), loopd, memoryd.

The symlink outlives the grant that let the tool write there: every root a call has had
writable (the mount labels' roots) counts, so retiring, narrowing or making read-only the wide
grant does not bring a grant through the symlink into force (the attack 31g's B1). Real
``brokerd serve``, as root and unprivileged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerd.grantstore import load_grants
from brokerd.ownerfiles import ToolReach
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from faults.stack import BIN

from .label_rig import LabelRig
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
        before = tree_hash(rig.outside)

        plant = via_call_tool("shell.run", {"cwd": str(work), "argv": [
            "sh", "-c", f"mv sub sub.old && ln -s {rig.outside} sub"]})
        stack.turn("plant", directive(plant), resume=False)
        assert (work / "sub").is_symlink(), tool_results(home, "plant")
        # The owner then adds a grant through the tree the tool writes: refused (and while it
        # is there, every call is denied)
        (stack.grants / "sub.toml").write_text(sub_grant(work))

        steal = via_call_tool("fs.read", {"path": str(work / "sub" / "secret.txt")})
        stack.turn("steal", directive(steal), resume=False)
        (result,) = tool_results(home, "steal")
        assert result["content"].startswith("Denied"), result
        assert CANARY not in result["content"] and CANARY not in str(rig.model.bodies)
        assert audited(home, "fs.read")[-1][0] == "deny"
        assert "sub.toml" in stack.log("brokerd") and "symlink" in stack.log("brokerd")
        assert chain_ok(home) and tree_hash(rig.outside) == before


# How the owner retires the wide grant, and where its tool planted the symlink.
RETIREMENTS = [("deleted", "pub"), ("made read-only", "a/b/pub"),
               ("narrowed to another tree", "a/pub")]


@pytest.fixture(params=["root", "unprivileged"])
def owner(request) -> Iterator[tuple[LabelRig, Path]]:
    """A LabelRig (brokerd as root, and unprivileged) and the owner's secret tree, holding the
    canary."""
    top = Path(tempfile.mkdtemp(prefix="bx-retarget-"))
    try:
        rig = LabelRig(top, unprivileged=request.param == "unprivileged")
        secret = rig.directory("owner-secret")
        (secret / "s.txt").write_text(CANARY)
        os.chmod(secret / "s.txt", 0o644)
        yield rig, secret
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize(("retired", "planted"), RETIREMENTS)
def test_a_symlink_planted_under_a_retired_writable_grant_re_targets_nothing(
        owner, retired, planted):
    """A public session, through a grant writing ``data/``, puts a symlink to the owner's
    secret tree where a public reader grant over ``data/<planted>`` will resolve. However the
    owner then retires the wide grant and writes the reader, it is refused at load, naming the
    written root, and a fresh public session gets no canary."""
    rig, secret = owner
    data = rig.directory("data")
    target = data / planted
    rig.directory(f"data/{Path(planted).parent}")
    elsewhere = rig.directory("elsewhere")
    rig.grant("wide", tools=["shell.run"], result_class="public", mounts=[(data, True)],
              argument=("cwd", str(data)))

    def reader() -> None:
        rig.grant("reader", tools=["fs.read"], result_class="public",
                  mounts=[(target, False)], argument=("path", f"{target}/**"))

    with rig:
        planting = rig.shell("plant", f"ln -s {secret} {planted}", data)
        assert planting.status == "ok" and target.is_symlink(), planting
        wide = rig.top / "grants" / "wide.toml"
        if retired.startswith("deleted"):
            wide.unlink()
        elif retired == "made read-only":
            wide.write_text(wide.read_text().replace("write = true", "write = false"))
        else:
            rig.grant("wide", tools=["shell.run"], result_class="public",
                      mounts=[(elsewhere, True)], argument=("cwd", str(elsewhere)))
        reader()  # written before, it would be refused and every call denied: no planting
        got = rig.call("fresh", "fs.read", {"path": f"{target}/s.txt"})
        assert got.status == "denied" and CANARY not in got.content, got
        checked = rig.brokerd("grants", "check")
        refused = checked.stdout + checked.stderr
        assert "reader.toml" in refused and str(data) in refused, refused
        assert rig.brokerd("audit", "verify").returncode == 0


def test_a_mount_that_resolves_elsewhere_than_when_its_grant_loaded_is_not_mounted(owner):
    """A grant loads while ``data/pub`` is a plain directory; later a symlink to the owner's
    secret tree stands in its place (what a call approved under a retired wide grant could still
    do) and the grants directory has not changed. The next call runs nothing and reads no
    canary."""
    rig, secret = owner
    pub = rig.directory("data/pub")
    (pub / "s.txt").write_text("public words")
    rig.grant("reader", tools=["fs.read", "shell.run"], result_class="public",
              mounts=[(pub, False)], argument=("path", f"{pub}/**"))
    with rig:
        assert rig.call("before", "fs.read", {"path": f"{pub}/s.txt"}).status == "ok"
        pub.rename(pub.with_name("pub.old"))
        pub.symlink_to(secret)
        got = rig.call("after", "fs.read", {"path": f"{pub}/s.txt"})
        assert got.status != "ok" and CANARY not in got.content, got
        assert "resolves elsewhere" in got.content, got
        assert rig.brokerd("audit", "verify").returncode == 0


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_a_grant_through_the_owners_symlinks_into_a_writable_mount_is_refused(
        tmp_path, hops, relative):
    """The owner's ``~/notes`` may be a symlink (docs/grants.md); when it, or a chain of them,
    leads into a tree a tool may write, a tool could swap the entry there: every entry the
    resolution reads counts, not only the path as written (the attack 31i's A1: the reader was
    re-targeted at the owner's secret tree). The same tree no tool writes any more (a retired
    root) refuses only once a symlink stands in it."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    grants = tmp_path / "grants"
    grants.mkdir()
    (grants / "shell.toml").write_text(shell_grant(work))
    target = work / "sub"
    for hop in range(hops):
        link = tmp_path / f"owner{hop}" / "notes"
        link.parent.mkdir()
        link.symlink_to(os.path.relpath(target, link.parent) if relative else target)
        target = link
    (grants / "reader.toml").write_text(grant(
        ["fs.read"], "auto", "private", argument=("path", "paths", f"{target}/**"),
        sandbox=f'mounts = [{{ path = "{target}" }}]'))
    loaded = load_grants(grants)
    assert [g.name for g in loaded.grants] == ["shell"]
    (error,) = loaded.errors
    assert "reader.toml" in str(error) and f"{work}/sub" in str(error), error

    (grants / "shell.toml").unlink()  # retired: what stands there now decides
    retired = ToolReach({str(work): False})
    assert [g.name for g in load_grants(grants, reach=retired).grants] == ["reader"]
    (work / "sub").rename(work / "sub.old")
    (work / "sub").symlink_to(tmp_path)
    assert load_grants(grants, reach=retired).grants == ()


@pytest.mark.parametrize("retired", [False, True], ids=["writable", "retired"])
def test_a_grant_file_that_is_a_symlink_into_a_written_tree_is_refused(tmp_path, retired):
    """The owner keeps a grant file elsewhere and links it into the grants directory; when it
    lies in a tree a tool may write, or once could, the tool can have written the grant
    (the attack 31i's H2: a tool rewrote it into a grant over the owner's secret tree)."""
    work = tmp_path / "work"
    work.mkdir()
    grants = tmp_path / "grants"
    grants.mkdir()
    if not retired:
        (grants / "shell.toml").write_text(shell_grant(work))
    (work / "reader.toml").write_text(grant(["fs.read"], "auto", "private",
                                            argument=("path", "paths", f"{tmp_path}/x/**"),
                                            sandbox=""))
    (grants / "reader.toml").symlink_to(work / "reader.toml")
    loaded = load_grants(grants, reach=ToolReach({str(work): False}) if retired else None)
    assert "reader" not in [g.name for g in loaded.grants]
    assert any("reader.toml" in str(e) and "reached through" in str(e)
               for e in loaded.errors), loaded


def test_a_grant_file_with_a_second_name_is_refused(tmp_path):
    """The attack 31j's E10: a tool drafts a harmless grant in a tree it writes and keeps a hard
    link to it; the owner reviews it and moves it into the grants directory; the tool rewrites
    it through its own name into a reader of the owner's secret tree. A grant file with more
    than one name is refused, whatever tree the other lies in; with one name it loads."""
    work, grants = tmp_path / "work", tmp_path / "grants"
    work.mkdir()
    grants.mkdir()
    draft = work / "draft.toml"
    draft.write_text(grant(["fs.read"], "auto", "private",
                           argument=("path", "paths", f"{tmp_path}/x/**"), sandbox=""))
    os.link(draft, work / "kept.toml")
    draft.rename(grants / "reader.toml")
    loaded = load_grants(grants)
    assert "reader" not in [g.name for g in loaded.grants]
    assert any("reader.toml" in str(e) and "hard link" in str(e) for e in loaded.errors), loaded
    (work / "kept.toml").unlink()
    assert "reader" in [g.name for g in load_grants(grants).grants]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_grant_file_owned_by_the_uid_tools_run_as_is_refused(tmp_path):
    """The attack 31k's K4: a tool drafted a grant, kept it open, and rewrote it through that
    descriptor after the owner moved it in (one name, in the grants directory). As root, tools
    run as a uid of their own, and a file it owns was made by a tool: refused; the same file
    the owner's loads."""
    grants = tmp_path / "grants"
    grants.mkdir()
    (grants / "reader.toml").write_text(grant(["fs.read"], "auto", "private",
                                              argument=("path", "paths", f"{tmp_path}/x/**"),
                                              sandbox=""))
    os.chown(grants / "reader.toml", DEFAULT_SANDBOX_UID, DEFAULT_SANDBOX_UID)
    loaded = load_grants(grants, reach=ToolReach(tools_uid=DEFAULT_SANDBOX_UID))
    assert "reader" not in [g.name for g in loaded.grants]
    assert any("reader.toml" in str(e) and "tools run as" in str(e) for e in loaded.errors)
    os.chown(grants / "reader.toml", 0, 0)
    tools = ToolReach(tools_uid=DEFAULT_SANDBOX_UID)
    assert "reader" in [g.name for g in load_grants(grants, reach=tools).grants]


def test_a_grant_file_whose_symlinks_pass_through_a_written_tree_is_refused(tmp_path):
    """The attack 31k's K17: the owner links a grant file through a symlink kept in a tree a
    tool writes (``grants/x.toml -> ws/link/x.toml``, ``ws/link -> ~/owner-safe``); a tool
    flipping ``ws/link`` between the owner's directory and its own hands brokerd its grant
    between a check of where the file ends and the read. Refused wherever ``ws/link`` points
    at the moment: it lies in the written tree."""
    work, safe, grants = tmp_path / "ws", tmp_path / "owner-safe", tmp_path / "grants"
    for directory in (work, safe, grants):
        directory.mkdir()
    (grants / "shell.toml").write_text(shell_grant(work))
    (safe / "x.toml").write_text(grant(["fs.read"], "auto", "private",
                                       argument=("path", "paths", f"{tmp_path}/x/**"),
                                       sandbox=""))
    (work / "link").symlink_to(safe)
    (grants / "x.toml").symlink_to(work / "link" / "x.toml")
    loaded = load_grants(grants)
    assert "x" not in [g.name for g in loaded.grants]
    assert any("x.toml" in str(e) and str(work / "link") in str(e) for e in loaded.errors)
