"""The shell around grant parsing: reads the owner's grants directory, and re-reads it when it
changes, so every call is decided against the grants as they are at that moment.

brokerd only ever reads this directory. Only ``*.toml`` files are grants: an editor's backup or
a README beside them is ignored. A file that fails to parse, reaches one of the harness's own
directories (``protected``, see ``policy._protected``), could have been written by a tool
(``ownerfiles.tool_hand``) or re-targeted by one (``retarget_risk``) is refused, loudly, naming
it; and while any file is refused, every call is denied: the file may have been a deny, which
no other grant may outlive (docs/decisions/a-refused-grant-file-denies-every-call.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .beneath import Root, resolve_arguments
from .errors import GrantError, LabelError
from .ownerfiles import (
    OwnerFile,
    ToolReach,
    inside,
    read_owner_file,
    resolution_steps,
    toml_files,
    tool_hand,
)
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


def read_grant(path: Path, protected: tuple[Protected, ...] = ()
               ) -> tuple[OwnerFile, Grant, list[str]]:
    """The file, the grant in it, and every host path its parsing resolved (globs' directory
    parts, mount paths), as written with ``~`` expanded. GrantError if it reaches a protected
    path."""
    file = read_owner_file(path, MAX_GRANT_FILE, GrantError, "a grant")
    resolved: list[str] = []

    def resolve(written: str) -> str:
        resolved.append(written)
        return real_path(written)

    grant = parse_grant(file.text, path, home=home(), resolve=resolve)
    why = reaching(grant, protected)
    if why is not None:
        raise GrantError(f"{path}: {why}; a grant may never reach the harness's own files, so "
                         "this one grants nothing")
    return file, grant, resolved


def load_grants(directory: Path, protected: tuple[Protected, ...] = (),
                reach: ToolReach | None = None) -> GrantSet:
    """Every ``*.toml`` grant in ``directory``; broken files are in ``errors``, and so is a grant
    reaching the harness's own files, a file a tool could have written (``ownerfiles.tool_hand``)
    or a grant a tool could re-target (``retarget_risk``), deny grants too. ``reach``: what
    tools can write and could have (none: nothing yet)."""
    reach = reach or ToolReach()
    parsed: list[tuple[OwnerFile, Grant, list[str]]] = []
    errors: list[GrantError] = []
    for path in toml_files(directory, GrantError, "grants"):
        try:
            parsed.append(read_grant(path, protected))
        except GrantError as exc:
            errors.append(exc)
    writable = [(f"grant {g.name}", m.source) for _, g, _ in parsed if g.mode != "deny"
                for m in g.mounts if m.writable]
    writable += [("a running call", Path(root)) for root, running in reach.written.items()
                 if running]
    retired = [Path(root) for root, running in reach.written.items() if not running]
    grants: list[Grant] = []
    for file, grant, resolved in parsed:
        # A deny grant too: what a tool wrote there may be its own deny, or a withdrawal of the
        # owner's (attack 31m, F3); GrantStore denies every call while any file is refused.
        why = tool_hand(file, reach, [source for _, source in writable])
        if why is None:
            why = retarget_risk(resolved, writable, retired)
        if why is None:
            grants.append(grant)
        else:
            errors.append(GrantError(f"{file.path}: {why}"))
    return GrantSet(tuple(grants), tuple(errors))


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
                if inside(entry, source):
                    return (f"{written} resolves through {entry}, inside the writable mount "
                            f"{source} of {owner}: a tool could replace it with a symlink "
                            "and re-target this grant at the next reload; grant a path outside "
                            "every writable mount")
            for source in retired:
                if inside(entry, source) and entry.is_symlink():
                    return (f"{written} resolves through {entry}, a symlink inside {source}, "
                            "which tools have written (brokerd labels show): a tool may have "
                            "put it there to re-target this grant; grant the path it points "
                            "to, or remove the symlink")
    return None


class GrantStore:
    """The grants in force. ``current()`` re-reads the directory when any file in it changed."""

    def __init__(self, directory: Path, protected: tuple[Protected, ...] = (),
                 reach: Callable[[], ToolReach] = ToolReach):
        self.directory = directory
        self.protected = protected
        self.reach = reach
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
            grants = load_grants(self.directory, self.protected, self.reach())
        except (GrantError, LabelError) as exc:
            log.error("%s: every call is denied until this is fixed", exc)
            return GrantSet((), (GrantError(str(exc)),))
        if grants.errors:
            # A refused or broken file may have been a deny, which no grant may outlive
            for error in grants.errors:
                log.error("grant refused: %s; every call is denied until it is fixed or "
                          "removed", error)
            return GrantSet((), grants.errors)
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
            signature.append((entry.name, info.st_ino, info.st_size, info.st_mtime_ns,
                              info.st_ctime_ns))
        return tuple(signature)


def resolve_paths(arguments: Mapping[str, Any], roots: Mapping[str, tuple[Root, ...]]
                  ) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """The named arguments resolved beneath their roots (``brokerd.beneath``, one walk each),
    and every entry each walk read. A refused one is left out of the first, and a grant
    constraining it by path does not match; its reads count all the same. Never raises."""
    walks = resolve_arguments(arguments, roots)
    return ({name: walk.path for name, walk in walks.items() if walk.path is not None},
            {name: walk.read for name, walk in walks.items()})
