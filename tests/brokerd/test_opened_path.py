"""The path a file tool opens is the one policy matched (``brokerd.policy._opened``, pure): the
host-resolved path placed in the deciding grant's mounts, with that grant's globs for it. One
row per rule; the race it closes is tests/security/test_path_race.py."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from brokerd.policy import CallArguments, parse_grant
from brokerd.policy._decide import decide, path_arguments
from brokerd.policy._opened import descend_regexes, place
from brokerd.sandbox.spec import Mount, OpenedPath
from brokerd.taint import CLEAN
from brokerd_support import NOW, request

HOME = Path("/home/o")
# the owner's ~/notes is a symlink to /data/notes: the sandbox shows it at ~/notes
LINKS = {"/home/o/notes": "/data/notes"}


def mount(source: str, target: str | None = None) -> Mount:
    return Mount(source=Path(source), target=target or source)


@pytest.mark.parametrize(("path", "mounts", "expected"), [
    ("/n/a.md", (mount("/n"),), ("/n", "a.md")),
    ("/n", (mount("/n"),), ("/n", "")),  # the mount itself
    ("/n/x/y/z", (mount("/n"),), ("/n", "x/y/z")),
    ("/nx/a.md", (mount("/n"),), None),  # a sibling sharing a prefix is not inside
    ("/elsewhere", (mount("/n"),), None),
    ("/data/notes/a.md", (mount("/data/notes", "/home/o/notes"),), ("/home/o/notes", "a.md")),
    ("/n/sub/a", (mount("/n"), mount("/n/sub", "/s")), ("/s", "a")),  # the deepest source
    ("/n/sub/a", (mount("/n"), mount("/m", "/n/sub")), None),  # hidden by a nested target
    ("/m/a", (mount("/n"), mount("/m", "/n/sub")), None),  # in a target nested in another
])
def test_a_resolved_path_is_placed_in_the_mount_that_holds_it(path, mounts, expected):
    placed = place(path, mounts)
    where = None if placed is None else (placed.root, placed.relative)
    assert where == expected
    if placed is not None:
        assert placed.host_path == path


def grant(text: str):
    return parse_grant(textwrap.dedent(text), "notes.toml", home=HOME,
                       resolve=lambda p: LINKS.get(p, p))


GLOBBED = grant("""
    tools = ["fs.read", "fs.search", "shell.run"]
    mode = "auto"
    classes = ["public"]
    [arguments.path]
    paths = ["~/notes/*.md", "~/notes"]
    [sandbox]
    mounts = [{ path = "~/notes" }]
""")


def spec_for(tool: str, path: str, resolved: str):
    req = request(tool, json.dumps({"path": path, "pattern": "x"}))
    decision = decide(req, (GLOBBED,), arguments=CallArguments.parse(req.arguments), now=NOW,
                      taint=CLEAN, resolved_paths={"path": resolved}, secrets={})
    return decision.authorize()


def test_the_spec_carries_the_resolved_path_and_the_deciding_grants_globs():
    spec = spec_for("fs.search", "/home/o/notes/../notes/a.md", "/data/notes/a.md")
    assert spec.opened == OpenedPath(
        root="/home/o/notes", relative="a.md", host_path="/data/notes/a.md",
        globs=(GLOBBED.arguments[0].paths[0].pattern, GLOBBED.arguments[0].paths[1].pattern),
        descend=(r"/data", r"/data/notes"))
    assert spec.opened.globs[0] == r"/data/notes/[^/]*\.md"


@pytest.mark.parametrize(("glob", "enters", "stays_out"), [
    ("/n/**/*.md", ["/n/a", "/n/a/b/c"], ["/m", "/nx"]),
    ("/n/docs/*.md", ["/n/docs"], ["/n/private", "/n/docs/deeper"]),
    ("/n/**", ["/n/a/b"], ["/m/a"]),
    ("/n/*/x/*.md", ["/n/a/x"], ["/n/a/y", "/n/a/x/z"]),
    ("/n", [], ["/n/a"]),  # the directory itself: nothing below it is granted
])
def test_a_walk_enters_only_directories_that_can_hold_a_match(glob, enters, stays_out):
    regexes = [re.compile(regex, re.DOTALL) for regex in descend_regexes(glob)]
    for directory in enters:
        assert any(r.fullmatch(directory) for r in regexes), directory
    for directory in stays_out:
        assert not any(r.fullmatch(directory) for r in regexes), directory


def test_a_tool_that_opens_no_path_gets_none():
    assert spec_for("shell.run", "/home/o/notes/a.md", "/data/notes/a.md").opened is None


def test_brokerd_resolves_a_file_tools_path_even_when_no_grant_constrains_it():
    assert path_arguments("fs.read", ()) == {"path"}
    assert path_arguments("shell.run", ()) == frozenset()
