"""``brokerd.beneath``: a path argument resolved in one walk beneath one root. Hypothesis builds
trees of directories, files and symlinks (relative and absolute, inside the root and out of it,
chains and loops) on the real filesystem and resolves generated paths through them.

The property: a walk reads nothing outside its root (every entry it read is beneath it), and
where it resolves a path that is where the kernel resolves it (``os.path.realpath``); a text
beneath no root reads nothing; over 40 links, ``/proc`` and ``..`` above the root are refused.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from brokerd.beneath import MAX_LINKS, PATH_MAX, resolve_beneath
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NAMES = ("a", "b", "c")
TARGETS = ("a", "b/c", "..", "../..", ".", "{root}/a", "{root}/b", "{outside}", "{root}/../x",
           "/proc/self/cwd", "c")


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str]]:
    """(relative path, what it is: "dir", "file" or a symlink target template)."""
    entries = []
    for top in NAMES:
        kind = draw(st.sampled_from(["dir", "file", "link"]))
        entries.append((top, draw(st.sampled_from(TARGETS)) if kind == "link" else kind))
        if kind == "dir":
            for below in NAMES:
                kind = draw(st.sampled_from(["dir", "file", "link"]))
                entries.append((f"{top}/{below}",
                                draw(st.sampled_from(TARGETS)) if kind == "link" else kind))
    return entries


def build(base: Path, entries: list[tuple[str, str]]) -> Path:
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir(exist_ok=True)
    for relative, what in entries:
        path = root / relative
        if what == "dir":
            path.mkdir()
        elif what == "file":
            path.write_text("x")
        else:
            path.symlink_to(what.format(root=root, outside=outside))
    return root


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=trees(), text=st.lists(st.sampled_from([*NAMES, "..", "."]), max_size=5),
       serial=st.integers(0, 10**9))
def test_a_walk_reads_only_beneath_its_root_and_resolves_as_the_kernel(tmp_path_factory, entries,
                                                                      text, serial):
    base = tmp_path_factory.mktemp(f"b{serial}")
    root = build(base, entries)
    given_path = "/".join([str(root), *text])
    walk = resolve_beneath(given_path, [(str(root), str(root))])
    assert all(step == str(root) or step.startswith(f"{root}/") for step in walk.read), walk
    if walk.path is not None:
        assert walk.path == os.path.realpath(given_path), walk
        assert walk.path == str(root) or walk.path.startswith(f"{root}/")


def test_a_text_beneath_no_root_reads_nothing(tmp_path):
    for text in ("/proc/1/cwd", f"{tmp_path}/../x", "relative", "/dev/fd/3"):
        walk = resolve_beneath(text, [(str(tmp_path / "root"), str(tmp_path / "root"))])
        assert walk.path is None and walk.read == (), walk


def test_over_forty_links_proc_and_dot_dot_above_the_root_are_refused(tmp_path):
    for links in (MAX_LINKS, MAX_LINKS + 1):
        top = tmp_path / f"n{links}"
        top.mkdir()
        (top / "end").write_text("x")
        for n in range(links):
            (top / f"l{n}").symlink_to(top / (f"l{n + 1}" if n + 1 < links else "end"))
        walk = resolve_beneath(str(top / "l0"), [(str(top), str(top))])
        assert (walk.path is None) == (links > MAX_LINKS), walk
        assert len(walk.read) == links + 1 + (links <= MAX_LINKS)  # root, links, end
    assert resolve_beneath("/proc/self/cwd", [("/", "/")]).path is None
    assert resolve_beneath(f"{tmp_path}/..", [(str(tmp_path), str(tmp_path))]).path is None
    assert resolve_beneath(posixpath.join(str(tmp_path), "n40", ".."),
                           [(str(tmp_path), str(tmp_path))]).path == str(tmp_path)


@settings(max_examples=30, deadline=None)
@given(length=st.integers(1, 9000), through_link=st.booleans())
def test_a_path_the_kernel_could_not_open_is_refused_before_anything_runs(tmp_path_factory,
                                                                         length, through_link):
    """Longer than PATH_MAX, as given or where a symlink on it leads, the path is refused with
    its length; it never reaches a sandbox's command line (the fourth attack on issue 31:
    200,000 characters failed the spawn with E2BIG, answered as a bug in brokerd)."""
    root = tmp_path_factory.mktemp("long")
    tail = "/".join(["d" * 200] * (length // 201 + 1))[:length].rstrip("/") or "d"
    head = "/".join(["h" * 200] * 15)  # 3,014 bytes: one symlink's target can hold it
    (root / "link").symlink_to(head)
    text = f"{root}/link/{tail}" if through_link else f"{root}/{tail}"
    leads_to = f"{root}/{head}/{tail}" if through_link else text
    walk = resolve_beneath(text, [(str(root), str(root))])
    kernel_could = max(len(os.fsencode(text)), len(os.fsencode(leads_to))) < PATH_MAX
    assert (walk.path is not None) == kernel_could, walk.refused
    if not kernel_could:
        assert "longer than" in (walk.refused or ""), walk.refused
