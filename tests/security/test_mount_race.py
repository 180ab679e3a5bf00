"""Issue 31: a mount's source swapped on the host after brokerd checked it and before the
sandbox bound it (attack 31i's A4 to A14: bwrap and podman bind by path, so the race once won
bound the owner's secret tree wherever a grant's mount was).

The race is won every time here, not by luck: brokerd's ``bwrap`` (and ``podman``) is a wrapper
on its PATH that makes the swap the test planned, then runs the real program. Hypothesis
chooses which component of the mount's path is swapped (the source itself or a directory above
it), how (a symlink, absolute or relative, to the owner's tree of the same shape; or the owner's
directory moved into its place), whether the grant's mount is writable, and the tool (fs.read,
fs.list, shell.run reading and writing there). A real ``brokerd serve`` as root and
unprivileged with bubblewrap, and through a podman service.

The property: a call whose mount was swapped reads nothing of the owner's tree, writes nothing
into it, and answers that nothing ran; the same call with no swap reads the grant's file (the
rig does reach the tree: the property is not vacuous); every allowed call has one audited
result and the log verifies (``serving_brokerd``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from faults.profile import by_profile
from faults.test_hostile_model import tree_hash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .flow_support import Answer, Brokerd, grant_text
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

EXAMPLES = by_profile(short=40, long=300)
# A podman service's calls cost about four times bubblewrap's.
REMOTE_EXAMPLES = by_profile(short=12, long=100)
CONFIGURATIONS = ["bubblewrap", "bubblewrap-unprivileged", "podman-remote"]
CANARY = "CANARY-mount-race-7c1e"
PUBLIC = "public words"
BELOW = ("a", "b", "pub")  # the mount's source is <tree>/a/b/pub; any of the three is swapped

# Run as brokerd's uid, in place of bwrap or podman: the planned swap, once, when the sandbox
# is being made (podman's "run", bwrap's "--seccomp"), then the real program.
WRAPPER = """#!/bin/sh
plan={plan}
case " $* " in
  *" run "*|*" --seccomp "*) if [ -f "$plan" ]; then sh -e "$plan"; rm -f "$plan"; fi ;;
esac
exec {real} "$@"
"""


@dataclass(frozen=True)
class Swap:
    tree: str  # "ro" or "rw": the grant mounts <tree>/a/b/pub read-only or writable
    depth: int  # how many components of a/b/pub stay: 2 swaps pub, 0 swaps a
    how: str  # "absolute", "relative" (a symlink) or "moved" (the owner's directory)
    tool: str


swaps = st.builds(Swap, tree=st.sampled_from(["ro", "rw"]), depth=st.integers(0, 2),
                  how=st.sampled_from(["absolute", "relative", "moved"]),
                  tool=st.sampled_from(["fs.read", "fs.list", "shell.run"]))


class Rig:
    def __init__(self, brokerd: Brokerd, root: Path, tool_uid: int, plan: Path, examples: int):
        self.brokerd, self.data, self.plan, self.examples = brokerd, root / "data", plan, examples
        self.calls = 0
        for tree in ("ro", "rw"):
            for top in (self.data / tree, self.data / "owner" / tree):
                source = top.joinpath(*BELOW)
                source.mkdir(parents=True)
                (source / "s.txt").write_text(CANARY if "owner" in top.parts else PUBLIC)
            mount = self.source(tree)
            write = tree == "rw"
            (brokerd.grants / f"files-{tree}.toml").write_text(grant_text(
                ["fs.read", "fs.list"], "public", argument="path",
                allowed=f"paths = [{json.dumps(f'{mount}/**')}]", mounts=[(mount, write)]))
            (brokerd.grants / f"shell-{tree}.toml").write_text(grant_text(
                ["shell.run"], "public", argument="cwd",
                allowed=f"paths = [{json.dumps(str(mount))}]", mounts=[(mount, write)]))
        if os.geteuid() == 0:
            for path in (self.data, *self.data.rglob("*")):
                os.chown(path, tool_uid, tool_uid)

    def source(self, tree: str) -> Path:
        return self.data.joinpath(tree, *BELOW)

    def call(self, swap: Swap) -> Answer:
        self.calls += 1
        mount = self.source(swap.tree)
        if swap.tool == "shell.run":
            script = "cat s.txt; echo planted > planted.txt"
            return self.brokerd.call("fresh", self.calls, "shell.run",
                                     {"argv": ["sh", "-c", script], "cwd": str(mount)})
        path = mount / "s.txt" if swap.tool == "fs.read" else mount
        return self.brokerd.call("fresh", self.calls, swap.tool, {"path": str(path)})

    def plan_swap(self, swap: Swap) -> tuple[Path, Path]:
        """Write the wrapper's plan; the swapped path and what stands aside meanwhile."""
        kept = BELOW[:swap.depth + 1]
        swapped = self.data.joinpath(swap.tree, *kept)
        owners = self.data.joinpath("owner", swap.tree, *kept)
        aside = swapped.with_name(swapped.name + ".aside")
        if swap.how == "moved":
            put = f"mv {owners} {swapped}"
        else:
            target = os.path.relpath(owners, swapped.parent) if swap.how == "relative" else owners
            put = f"ln -s {target} {swapped}"
        self.plan.write_text(f"mv {swapped} {aside}\n{put}\n")
        os.chmod(self.plan, 0o644)
        return swapped, aside

    def undo(self, swap: Swap, swapped: Path, aside: Path) -> None:
        if swap.how == "moved":
            swapped.rename(self.data.joinpath("owner", swap.tree, *BELOW[:swap.depth + 1]))
        else:
            swapped.unlink()
        aside.rename(swapped)
        (self.source(swap.tree) / "planted.txt").unlink(missing_ok=True)


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    wrappers = Path(tempfile.mkdtemp(prefix="bx-race-bin-"))
    try:
        os.chmod(wrappers, 0o755)
        plan = wrappers / "plans" / "plan"
        plan.parent.mkdir()
        for program in ("bwrap", "podman"):
            real = shutil.which(program) or f"/usr/bin/{program}"
            (wrappers / program).write_text(WRAPPER.format(plan=plan, real=real))
            os.chmod(wrappers / program, 0o755)
        base = os.environ["PATH"] if request.param != "bubblewrap-unprivileged" else "/usr/bin:/bin"
        env = {"PATH": f"{wrappers}:{base}"}
        with serving_brokerd(request, request.param, "bx-race-", more_env=env) as served:
            brokerd, root, tool_uid = served
            uid = os.geteuid() if brokerd.uid is None else brokerd.uid
            os.chown(plan.parent, uid, uid)  # the wrapper, as brokerd, removes the plan
            examples = REMOTE_EXAMPLES if request.param == "podman-remote" else EXAMPLES
            yield Rig(brokerd, root, tool_uid, plan, examples)
    finally:
        shutil.rmtree(wrappers, ignore_errors=True)


@pytest.mark.parametrize("rig", CONFIGURATIONS, indirect=True)
def test_a_mount_swapped_while_the_sandbox_is_made_binds_nothing_of_the_owners(rig: Rig):
    @settings(max_examples=rig.examples, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(swap=swaps)
    def one(swap: Swap) -> None:
        plain = rig.call(swap)
        shown = "s.txt" if swap.tool == "fs.list" else PUBLIC
        assert plain.status == "ok" and shown in plain.content, (swap, plain)
        (rig.source(swap.tree) / "planted.txt").unlink(missing_ok=True)
        owners = tree_hash(rig.data / "owner")
        swapped, aside = rig.plan_swap(swap)
        raced = rig.call(swap)
        assert not rig.plan.exists(), "the wrapper made no swap: the example shows nothing"
        rig.undo(swap, swapped, aside)
        assert CANARY not in raced.content, (swap, raced)
        assert raced.status == "failed" and "Nothing ran" in raced.content, (swap, raced)
        assert tree_hash(rig.data / "owner") == owners, f"{swap}: the owner's tree was written"

    one()
