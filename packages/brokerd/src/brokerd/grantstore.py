"""The shell around grant parsing: reads the owner's grants directory, and re-reads it when it
changes, so every call is decided against the grants as they are at that moment.

brokerd only ever reads this directory. A file that fails to parse is logged loudly and grants
nothing; the other files still count. Only ``*.toml`` files are grants: an editor's backup or a
README beside them is ignored. A grant that reaches one of the harness's own directories
(``protected``, see ``policy._protected``) is refused like a broken file, naming it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ._files import read_text, toml_files
from .beneath import Root, resolve_arguments
from .errors import GrantError
from .policy import Grant, parse_grant
from .policy._protected import Protected, reaching

log = logging.getLogger("brokerd.grants")

MAX_GRANT_FILE = 256 * 1024


@dataclass(frozen=True)
class GrantSet:
    grants: tuple[Grant, ...]
    errors: tuple[GrantError, ...]


def real_path(path: str) -> str:
    """A path with symlinks and ``..`` resolved, as far as it exists (a file yet to be written
    resolves through its existing parent directories)."""
    return os.path.realpath(path)


def home() -> Path:
    return Path(os.path.expanduser("~"))


def read_grant(path: Path, protected: tuple[Protected, ...] = ()) -> tuple[Grant, list[str]]:
    """The grant in ``path``, and every host path its parsing resolved (globs' directory parts,
    mount paths), as written with ``~`` expanded. GrantError if it reaches a protected path."""
    text = read_text(path, MAX_GRANT_FILE, GrantError, "a grant")
    resolved: list[str] = []

    def resolve(written: str) -> str:
        resolved.append(written)
        return real_path(written)

    grant = parse_grant(text, path, home=home(), resolve=resolve)
    why = reaching(grant, protected)
    if why is not None:
        raise GrantError(f"{path}: {why}; a grant may never reach the harness's own files, so "
                         "this one grants nothing")
    return grant, resolved


def load_grants(directory: Path, protected: tuple[Protected, ...] = (),
                written: Mapping[str, bool] | None = None,
                tools_uid: int | None = None) -> GrantSet:
    """Every ``*.toml`` grant in ``directory``; broken files are in ``errors`` and grant nothing,
    and so does a grant reaching the harness's own files, or an auto or ask grant a tool could
    re-target (``retarget_risk``). ``written``: every root a call has had writable (the mount
    labels' roots), and whether a running call can write it now: a symlink a tool planted
    there outlives the grant that let it. ``tools_uid``: the uid tools run as when it is not
    brokerd's own (root): a grant file it owns was made by a tool."""
    parsed: list[tuple[Path, Grant, list[str]]] = []
    errors: list[GrantError] = []
    for path in toml_files(directory, GrantError, "grants"):
        try:
            parsed.append((path, *read_grant(path, protected)))
        except GrantError as exc:
            errors.append(exc)
    writable = [(f"grant {g.name}", m.source) for _, g, _ in parsed if g.mode != "deny"
                for m in g.mounts if m.writable]
    written = written or {}
    writable += [("a running call", Path(root)) for root, running in written.items() if running]
    retired = [Path(root) for root, running in written.items() if not running]
    grants: list[Grant] = []
    for path, grant, resolved in parsed:
        why = _written_file(path, writable, retired, tools_uid)
        if why is None and grant.mode != "deny":
            why = retarget_risk(resolved, writable, retired)
        if why is None:
            grants.append(grant)
        else:
            errors.append(GrantError(f"{path}: {why}"))
    return GrantSet(tuple(grants), tuple(errors))


def _written_file(path: Path, writable: list[tuple[str, Path]],
                  retired: Sequence[Path], tools_uid: int | None) -> str | None:
    """Why a grant file a tool could have written is refused: the owner's symlink from the
    grants directory into a tree a tool may write, or once could, hands it the grant's text;
    so does a second name (a hard link) anywhere, which brokerd cannot find (attack 31j, E10: a
    tool kept one to a grant it drafted and the owner moved in)."""
    try:
        found = path.stat()
    except OSError as exc:
        return f"the grant file cannot be read: {exc.strerror}"
    if found.st_uid == tools_uid:  # a tool may still hold it open (attack 31k, K4)
        return (f"the grant file belongs to uid {tools_uid}, which tools run as: a tool made it "
                "and may still hold it open to rewrite it; copy it in as yourself")
    links = found.st_nlink
    if links > 1:
        return (f"the grant file has {links} names (hard links): a tool holding another could "
                "rewrite it; keep one name, in the grants directory")
    # Every entry its resolution reads, not only where it ends: a symlink a tool can swap on
    # the way would hand it the grant between a check and a read (attack 31k, K17).
    roots = [source for _, source in writable] + list(retired)
    for entry in resolution_steps(str(path)):
        for source in roots:
            if _inside(entry, source):
                return (f"the grant file's symlinks lead through {entry}, inside {source}, "
                        "which tools may write or have written: a tool could have written this "
                        "grant; keep grant files out of granted trees")
    return None


def retarget_risk(paths: list[str], writable: list[tuple[str, Path]],
                  retired: Sequence[Path] = ()) -> str | None:
    """Why a grant resolving ``paths`` could be re-targeted by a tool, or None.

    Paths are resolved when grants load. If one step of that resolution is a directory entry
    inside a mount some grant lets a tool write (not the mount itself: a tool cannot replace
    its own mount point), the tool can swap it for a symlink, and the next reload would point
    this grant wherever the symlink says. Such a grant is refused, loudly, naming both. In a
    root that tools wrote once and no grant or running call lets them write now (``retired``)
    nothing can be swapped any more, but a symlink a tool left there still points the grant
    where the tool chose: a step that is a symlink there is refused too.
    """
    for written in paths:
        for entry in resolution_steps(written):
            for owner, source in writable:
                if _inside(entry, source):
                    return (f"{written} resolves through {entry}, inside the writable mount "
                            f"{source} of {owner}: a tool could replace it with a symlink "
                            "and re-target this grant at the next reload; grant a path outside "
                            "every writable mount")
            for source in retired:
                if _inside(entry, source) and entry.is_symlink():
                    return (f"{written} resolves through {entry}, a symlink inside {source}, "
                            "which tools have written (brokerd labels show): a tool may have "
                            "put it there to re-target this grant; grant the path it points "
                            "to, or remove the symlink")
    return None


def _inside(entry: Path, root: Path) -> bool:
    """Whether ``entry`` lies below ``root``: a tool that writes ``root`` can replace it (not
    ``root`` itself, its own mount point)."""
    return entry != root and entry.is_relative_to(root)


def resolution_steps(path: str, links: int = 40) -> list[Path]:
    """Every directory entry resolving ``path`` reads, where it sits (its parent resolved): the
    path's own components and, through each symlink met, its target's (an owner's
    ``~/notes -> /data/sub`` reads ``/data/sub``, which a tool writing ``/data`` could swap)."""
    steps: list[Path] = []
    pending = list(PurePosixPath(path).parts[1:])
    where = Path("/")
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            where = where.parent
            continue
        entry = where / name
        steps.append(entry)
        try:
            target = PurePosixPath(os.readlink(entry)) if links > 0 else None
        except OSError:  # not a symlink, gone, or unreadable: the walk goes on as the kernel's
            target = None
        if target is not None:
            links -= 1
            where = Path("/") if target.is_absolute() else where
            pending = list(target.parts[1:] if target.is_absolute() else target.parts) + pending
        else:
            where = entry
    return steps


class GrantStore:
    """The grants in force. ``current()`` re-reads the directory when any file in it changed."""

    def __init__(self, directory: Path, protected: tuple[Protected, ...] = (),
                 written: Callable[[], Mapping[str, bool]] = dict,
                 tools_uid: int | None = None):
        self.directory = directory
        self.protected = protected
        self.written = written
        self.tools_uid = tools_uid
        self._signature: tuple[Any, ...] | None = None
        self._set = GrantSet((), ())

    def current(self) -> tuple[Grant, ...]:
        signature = self._signature_now()
        if signature != self._signature:
            self._set = self._load()
            self._signature = signature
        return self._set.grants

    def _load(self) -> GrantSet:
        try:
            grants = load_grants(self.directory, self.protected, self.written(), self.tools_uid)
        except GrantError as exc:
            log.error("%s: every call is denied until this is fixed", exc)
            return GrantSet((), (exc,))
        for error in grants.errors:
            log.error("grant refused, it grants nothing: %s", error)
        if not grants.grants:
            log.error("no valid grant in %s: every tool call except memory is denied",
                      self.directory)
        else:
            log.info("%d grant(s) in force from %s", len(grants.grants), self.directory)
        return grants

    def _signature_now(self) -> tuple[Any, ...]:
        try:
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except OSError:
            return ("missing",)
        signature = []
        for entry in entries:
            try:
                info = entry.stat()
            except OSError:
                continue
            signature.append((entry.name, info.st_ino, info.st_size, info.st_mtime_ns))
        return tuple(signature)


def resolve_paths(arguments: Mapping[str, Any], roots: Mapping[str, tuple[Root, ...]]
                  ) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """The named arguments resolved beneath their roots (``brokerd.beneath``, one walk each),
    and every entry each walk read. A refused one is left out of the first, and a grant
    constraining it by path does not match; its reads count all the same. Never raises."""
    walks = resolve_arguments(arguments, roots)
    return ({name: walk.path for name, walk in walks.items() if walk.path is not None},
            {name: walk.read for name, walk in walks.items()})
