"""The owner's side of the flow property test: a tree of directories some grants mount (nested,
overlapping, writable or not), the grants themselves, seeded files, a web page, and what is on
disk now (the test picks what a call works on from it; what a result must say comes only from
the canaries in it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from .flow_support import CLASSES, RANK, Canaries, Label, grant_text
from .laundering_support import Page

# The directories grants may mount, relative to the tree: two nestings, three roots.
MOUNTS = ("a", "a/b", "c", "c/d", "e")
NAME_MAX = 255


@dataclass(frozen=True)
class ShellGrant:
    mounts: tuple[tuple[str, bool], ...]  # (directory, writable)
    result_class: str


@dataclass(frozen=True)
class Layout:
    classes: dict[str, str]  # each mount's seeded file: its class
    shell: tuple[ShellGrant, ...]
    read_class: dict[str, str]  # the fs.read/fs.list grant of each mount: its result class
    fetch_class: str


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer + "/")


def _highest(classes: list[str]) -> str:
    return max(classes, key=RANK.__getitem__, default="public")


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    classes = {m: draw(st.sampled_from(CLASSES), label=f"class of {m}") for m in MOUNTS}
    drawn = draw(st.lists(st.tuples(
        st.lists(st.tuples(st.sampled_from(MOUNTS), st.booleans()), min_size=1, max_size=3,
                 unique_by=lambda mount: mount[0]),
        st.one_of(st.just("public"), st.sampled_from(CLASSES))), min_size=2, max_size=4),
        label="shell grants")
    writable = {m for mounts, _ in drawn for m, w in mounts if w}

    # brokerd refuses a grant whose mount lies inside another grant's writable mount (it could
    # be swapped for a symlink): the owner leaves those out.
    def allowed(mount: str) -> bool:
        return not any(_within(mount, w) and mount != w for w in writable)

    def reach(mounts: list[str]) -> str:
        """The highest class seeded anywhere these mounts show (nested ones included)."""
        return _highest([classes[m] for m in MOUNTS for top in mounts if _within(m, top)])

    # A grant's result class is what it can read, or (sometimes) more: the owner is careful.
    higher = st.one_of(st.just("public"), st.sampled_from(CLASSES))
    shell = []
    for mounts, result_class in drawn:
        kept = tuple((m, w) for m, w in mounts if allowed(m))
        shell.append(ShellGrant(kept, _highest([result_class, reach([m for m, _ in kept])])))
    read_class = {m: _highest([draw(higher, label=f"read class of {m}"), reach([m])])
                  for m in MOUNTS if allowed(m)}
    return Layout(classes, tuple(shell), read_class,
                  draw(higher, label="web page grant's class"))


class Tree:
    def __init__(self, base: Path, layout: Layout, canaries: Canaries, tool_uid: int):
        self.base, self.layout, self.tool_uid = base, layout, tool_uid
        self.keys = base.parent / "keys"
        base.mkdir(mode=0o755)
        for mount in MOUNTS:
            self.create((base / mount).as_posix().encode(), directory=True)
        for mount in MOUNTS:  # the owner's files, one per mount, of the mount's class
            label = Label(layout.classes[mount])
            name = f"seed-{canaries.new(label)}"  # a name's canary is not its content's
            self.create(os.fsencode(base / mount / name), canaries.new(label).encode() + b"\n")
        for number in range(len(layout.shell)):
            self.key(number).mkdir(parents=True, mode=0o755)
        self.page = Page(canaries.new(Label("public", True)) + "\n")
        self.page_url = self.page.url()

    def key(self, grant: int) -> Path:
        """The working directory that selects shell grant ``grant`` (its ``cwd`` argument)."""
        return self.keys / f"g{grant}"

    def write_grants(self, directory: Path) -> None:
        for mount, result_class in self.layout.read_class.items():
            top = self.base / mount
            (directory / f"read-{mount.replace('/', '-')}.toml").write_text(grant_text(
                ["fs.read", "fs.list"], result_class, argument="path",
                allowed=f'paths = ["{top}/**"]', mounts=[(top, False)]))
        for number, shell in enumerate(self.layout.shell):
            (directory / f"shell-{number}.toml").write_text(grant_text(
                ["shell.run"], shell.result_class, argument="cwd",
                allowed=f'paths = ["{self.key(number)}"]',
                mounts=[(self.key(number), False)]
                + [(self.base / m, w) for m, w in shell.mounts]))
        host = f"127.0.0.1:{self.page.port}"
        (directory / "web.toml").write_text(grant_text(
            ["http.fetch"], self.layout.fetch_class, argument="url",
            allowed='hosts = ["127.0.0.1"]', mounts=[], extra=f'hosts = ["{host}"]\n'))

    def close(self) -> None:
        self.page.close()

    # --- the owner's own writes ---------------------------------------------------------------

    def create(self, path: bytes, content: bytes = b"", *, directory: bool = False) -> None:
        if directory:
            os.makedirs(path, mode=0o755, exist_ok=True)
        else:
            with open(path, "wb") as file:
                file.write(content)
        os.chown(path, self.tool_uid, self.tool_uid)

    def holds(self, path: bytes, canary: str) -> bool:
        try:
            with open(path, "rb") as file:
                return canary.encode() in file.read()
        except OSError:
            return False

    # --- what is on disk now ------------------------------------------------------------------

    def _mounts(self, grant: int | None) -> list[tuple[bytes, bool]]:
        if grant is None:
            return [(os.fsencode(self.base), False)]
        return [(os.fsencode(self.base / m), w) for m, w in self.layout.shell[grant].mounts]

    def _deepest(self, grant: int | None, path: bytes) -> tuple[bytes, bool] | None:
        inside = [(m, w) for m, w in self._mounts(grant) if path == m or path.startswith(m + b"/")]
        return max(inside, key=lambda mount: len(mount[0]), default=None)

    def _entries(self, grant: int | None) -> tuple[list[bytes], list[bytes]]:
        """(directories, everything else) under the grant's mounts, symlinks not followed."""
        directories: set[bytes] = set()
        others: set[bytes] = set()
        pending = [m for m, _ in self._mounts(grant)]
        while pending:
            top = pending.pop()
            if top in directories:
                continue
            directories.add(top)
            try:
                listing = list(os.scandir(top))
            except OSError:
                continue
            for entry in listing:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                else:
                    others.add(entry.path)
        return sorted(directories), sorted(others)

    def files(self, grant: int | None, *, writable: bool = False,
              utf8: bool = False) -> list[bytes]:
        found = self._entries(grant)[1]
        if writable:
            found = [f for f in found if (self._deepest(grant, f) or (b"", False))[1]]
        if utf8:
            found = [f for f in found if decodes(f)]
        return found

    def seeds(self) -> list[bytes]:
        return [f for f in self.files(None) if os.path.basename(f).startswith(b"seed-")
                and decodes(f)]

    def directories(self, grant: int | None, *, writable: bool = False,
                    mount_of: bytes | None = None, movable: bool = False) -> list[bytes]:
        found = self._entries(grant)[0]
        if writable:
            found = [d for d in found if (self._deepest(grant, d) or (b"", False))[1]]
        if mount_of is not None:
            found = [d for d in found if self._deepest(grant, d) == self._deepest(grant, mount_of)]
        if movable:  # the owner's layout stays: mounts are never renamed
            fixed = {os.fsencode(self.base / m) for m in MOUNTS}
            found = [d for d in found if d not in fixed]
        return found

    def new_name(self, parent: bytes, text: str, kind: str) -> bytes:
        """A new path in ``parent`` whose name carries ``text`` (a canary)."""
        name = text.encode()
        if kind == "not-utf-8":
            name = b"\xff\xfe-" + name
        elif kind == "long":
            name = (name + b"-" + b"L" * NAME_MAX)[:NAME_MAX]
        elif kind == "new-directory":
            return parent + b"/d-" + name + b"/" + name
        return parent + b"/" + name


def decodes(path: bytes) -> bool:
    try:
        path.decode()
    except UnicodeDecodeError:
        return False
    return True
