"""Escapes: the path a file tool opens is the path policy decided, whatever a concurrent writer
swaps in between (issue 31, attack 6).

brokerd resolves a call's ``path`` on the host and matches the grant's globs; the sandbox used
to resolve it again and check only the mount's root, so a writer flipping a component to a
symlink made fs.read read outside a ``*.md`` glob. Here, in every configuration (bubblewrap as
root and unprivileged, rootful podman and a podman service), a grant for the ``*.md`` files
(and ``d*`` directories) under ``pub`` of a read-only mount; files outside the globs, inside the
mount and outside it, hold ``OUT-CANARY`` (in their content, and in a file name beside them).

Each example draws a shape: how deep the granted file is, which of its components is swapped,
for a symlink to what (a directory or a file; in the mount outside the globs, outside the
mount, or a sibling in the same directory; absolute, or relative with ``..``), and a few calls
of fs.read, fs.list and fs.search. For each call brokerd's real policy decides on the real
layout (so it is allowed), then a swapper process exchanges the component with the symlink
(``renameat2(RENAME_EXCHANGE)``: the path always names one or the other) as fast as it can
while the real sandbox runs the call. The property is checked on every result, whoever won the
race: no result, and no error text, ever contains ``OUT-CANARY``. The same shapes with ``pub``
mounted writable and fs.write overwriting the granted file: no file outside the globs changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from brokerd.grantstore import read_grant, resolve_paths
from brokerd.policy import CallArguments, Grant, decide, path_roots
from brokerd.sandbox import SandboxSpec
from brokerd.taint import CLEAN
from bxcore.tools import ToolRequest
from faults.profile import by_profile, hang_guard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

IN, OUT = "IN-CANARY", "OUT-CANARY"
EXAMPLES = by_profile(short=2, long=200)
# (tool, from pub's top): fs.list and fs.search on the swapped directory (or the file's), or on
# pub, so a walk meets the swap below where it started
CALLS = st.lists(st.tuples(st.sampled_from(["fs.read", "fs.list", "fs.search"]), st.booleans()),
                 min_size=1, max_size=3)

# Exchanges argv[1] and argv[2] (renameat2 RENAME_EXCHANGE) while told "go", until "stop";
# then leaves both as they were and answers how many exchanges it made.
SWAPPER = """
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
here, there = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
def exchange():
    if libc.renameat2(-100, here, -100, there, 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
flipping = threading.Event()
count = [0]
def flip():
    while flipping.is_set():
        exchange()
        count[0] += 1
for line in sys.stdin:
    if line.strip() == "go":
        flipping.set()
        worker = threading.Thread(target=flip)
        worker.start()
        print("going", flush=True)
    else:
        flipping.clear()
        worker.join()
        if count[0] % 2:
            exchange()
            count[0] += 1
        print(count[0], flush=True)
"""


@dataclass(frozen=True)
class Shape:
    depth: int  # directories between pub and the granted file
    swapped: int  # which component of the file's path below pub (0 = the first directory)
    area: str  # where the symlink leads: "private" (in the mount), "outside", "sibling"
    kind: str  # "dir" or "file": what it leads to
    relative: bool  # a relative target (with ..) or an absolute one


SHAPES = st.builds(
    Shape, depth=st.integers(0, 2), swapped=st.integers(0, 2),
    area=st.sampled_from(["private", "outside", "sibling"]), kind=st.sampled_from(["dir", "file"]),
    relative=st.booleans())


def plant(top: Path, shape: Shape) -> tuple[Path, Path, Path, Path]:
    """The layout; returns the mount, the granted file, the swapped component and its symlink
    (made in ``stage``, outside the globs, to be exchanged with the component)."""
    mount = top / "m"
    parts = [f"d{i}" for i in range(shape.depth)] + ["f.md"]
    file = mount / "pub" / Path(*parts)
    file.parent.mkdir(parents=True)
    file.write_text(f"{IN} granted\n")
    for base, canary in ((mount / "private", OUT), (top / "outside", OUT)):
        mirror = base / Path(*parts)  # the same names, so a path through a symlink resolves
        mirror.parent.mkdir(parents=True)
        mirror.write_text(f"{canary} {base.name}\n")
        for directory in (base, *mirror.parents):
            if directory.is_relative_to(base):
                (directory / f"{OUT}-listed").write_text(f"{OUT}\n")
    for directory in (file.parent, *file.parents):
        if directory.is_relative_to(mount / "pub"):
            (directory / "x.txt").write_text(f"{OUT} sibling\n")  # outside the globs
    index = min(shape.swapped, len(parts) - 1)
    component = mount / "pub" / Path(*parts[: index + 1])
    if shape.area == "sibling":
        target = component.parent / "x.txt"
    else:
        base = mount / "private" if shape.area == "private" else top / "outside"
        target = base / Path(*parts[: index + 1])
        if (shape.kind == "dir") != target.is_dir():
            target = target.parent if shape.kind == "dir" else base / f"{OUT}-listed"
    stage = mount / "stage"
    stage.mkdir()
    link = stage / component.name
    os.symlink(os.path.relpath(target, component.parent) if shape.relative else target, link)
    for path in (top, *top.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)  # every configuration's uid reads
    return mount, file, component, link


def grant_file(top: Path, mount: Path) -> Path:
    path = top / "grants" / "race.toml"
    path.parent.mkdir()
    path.write_text(f"""
tools = ["fs.read", "fs.list", "fs.search"]
mode = "auto"
classes = ["public"]
result_class = "public"
[arguments.path]
paths = ["{mount}/pub", "{mount}/pub/**/*.md", "{mount}/pub/**/d*"]
[sandbox]
mounts = [{{ path = "{mount}" }}]
""")
    return path


def arguments_for(tool: str, top: bool, mount: Path, file: Path, component: Path
                  ) -> dict[str, str]:
    if tool == "fs.read":
        return {"path": str(file)}
    where = str(mount / "pub" if top
                else component if component.name.startswith("d") else component.parent)
    return {"path": where, "pattern": "CANARY"} if tool == "fs.search" else {"path": where}


class Swapper:
    def __init__(self, here: Path, there: Path):
        self.process = subprocess.Popen([sys.executable, "-c", SWAPPER, str(here), str(there)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def say(self, word: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        self.process.communicate("")


def decided(grant: Grant, number: int, tool: str, arguments: dict[str, str]) -> SandboxSpec:
    """brokerd's real decision on the layout as it is now (unswapped): it must allow."""
    text = json.dumps(arguments)
    request = ToolRequest(session="s-race", call=number, tool=tool, arguments=text)
    decision = decide(request, (grant,), arguments=CallArguments.parse(text),
                      now=datetime.now(UTC), taint=CLEAN, secrets={},
                      resolved_paths=resolve_paths(arguments, path_roots(tool, (grant,)))[0])
    assert decision.allowed, decision.record.reason
    return decision.authorize()


def report(raced: list[tuple[str, int, bool]]) -> None:
    flips = sorted(f for _, f, _ in raced)
    print(f"path race: {len(raced)} calls, {sum(1 for *_, ok in raced if not ok)} refused, "
          f"exchanges during a call: fewest {flips[0]}, median {flips[len(flips) // 2]}")


@hang_guard(trials=EXAMPLES * 3, per_trial=120.0)
def test_a_swapped_symlink_never_leads_a_file_tool_outside_the_globs(caller):
    raced = []  # (tool, exchanges during the call, whether the call succeeded)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(shape=SHAPES, calls=CALLS)
    def check(shape: Shape, calls: list[tuple[str, bool]]) -> None:
        top = Path(tempfile.mkdtemp(prefix="bx-race-"))
        try:
            mount, file, component, link = plant(top, shape)
            _, grant, _ = read_grant(grant_file(top, mount))
            swapper = Swapper(component, link)
            try:
                for number, (tool, from_top) in enumerate(calls, start=1):
                    arguments = arguments_for(tool, from_top, mount, file, component)
                    spec = decided(grant, number, tool, arguments)
                    assert swapper.say("go") == "going"
                    result = caller.call(spec)
                    raced.append((tool, int(swapper.say("stop")), result.ok))
                    assert OUT not in result.text, (shape, tool, result.text)
                    if result.ok and tool == "fs.read":
                        assert IN in result.text
            finally:
                swapper.close()
        finally:
            shutil.rmtree(top, ignore_errors=True)

    check()
    report(raced)


def write_grant_file(top: Path, pub: Path) -> Path:
    """fs.write on the ``*.md`` files under ``pub``, mounted writable. The glob starts at the
    writable mount's own directory, as brokerd requires (docs/grants.md)."""
    path = top / "grants" / "write.toml"
    path.parent.mkdir()
    path.write_text(f"""
tools = ["fs.write"]
mode = "auto"
classes = ["public"]
result_class = "public"
[arguments.path]
paths = ["{pub}/**/*.md"]
[sandbox]
mounts = [{{ path = "{pub}", write = true }}]
""")
    return path


def untouchable(top: Path, pub: Path) -> dict[Path, bytes]:
    """Every regular file a write may not change: all but the ``*.md`` files under ``pub``."""
    found = {}
    for directory, _, files in os.walk(top):
        for name in files:
            path = Path(directory, name)
            granted = path.is_relative_to(pub) and name.endswith(".md")
            if not granted and not path.is_symlink():
                found[path] = path.read_bytes()
    return found


@hang_guard(trials=EXAMPLES * 3, per_trial=120.0)
def test_a_swapped_symlink_never_leads_fs_write_outside_the_globs(caller):
    """The same shapes, with ``pub`` mounted writable and fs.write overwriting the granted
    file while the swapper runs: no file outside the globs (in the mount or outside it) is
    changed, and none appears."""
    raced = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(shape=SHAPES, writes=st.integers(1, 3))
    def check(shape: Shape, writes: int) -> None:
        top = Path(tempfile.mkdtemp(prefix="bx-race-"))
        try:
            mount, file, component, link = plant(top, shape)
            pub = mount / "pub"
            if os.geteuid() == 0:  # the tool's uid must be able to write there
                for path in (pub, *pub.rglob("*")):
                    os.lchown(path, caller.uid, caller.uid)
            _, grant, _ = read_grant(write_grant_file(top, pub))
            before = untouchable(top, pub)
            swapper = Swapper(component, link)
            try:
                for number in range(writes):
                    arguments = {"path": str(file), "content": f"{IN} written {number}\n",
                                 "mode": "overwrite"}
                    spec = decided(grant, number + 1, "fs.write", arguments)
                    assert swapper.say("go") == "going"
                    result = caller.call(spec)
                    raced.append(("fs.write", int(swapper.say("stop")), result.ok))
                    assert OUT not in result.text, (shape, result.text)
            finally:
                swapper.close()
            assert untouchable(top, pub) == before, shape
        finally:
            shutil.rmtree(top, ignore_errors=True)

    check()
    report(raced)
