"""Grants never reach the harness itself (pure).

A mount or a path constraint that covers, sits inside, or sits above one of the harness's own
directories (its state, its sockets, the grants and jobs the owner wrote, where its secrets
come from, each call's scratch) would hand a tool the audit log, the sessions, memory, the
secrets, or a socket: a Unix socket in a read-only bind mount still accepts connections, so a
tool could answer its own approvals or submit calls as a fresh session. Such a grant is refused
at load, naming its file, the key, and the directory it reaches; it grants nothing.

The harness's code (the toolkit, every role's package, the Python environment they run from;
``brokerd.harness_code``) is protected from writing only (``writes_only``): a writable mount
that reaches it is refused, a read-only one is not, since only a writable mount can change
what later sandboxes and roles run, and reading code shows nothing secret.

Paths are compared after symlinks are resolved on both sides (the grant's by ``parse_grant``,
the harness's by the caller), so ``~`` reaching ``~/.local/state/boxmaker`` through a link is
caught as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._match import literal_prefix
from .grants import Grant


@dataclass(frozen=True, kw_only=True)
class Protected:
    """One harness directory (or file) no grant may reach, and what it is, for the message."""

    path: str  # absolute, resolved
    what: str  # e.g. "the state directory ([paths] home)"
    writes_only: bool = False  # code: only a writable mount may not reach it


def reaching(grant: Grant, protected: tuple[Protected, ...]) -> str | None:
    """Why ``grant`` reaches a protected path (its key and the path), or None when it does not."""
    for index, mount in enumerate(grant.mounts):
        hit = _overlap(str(mount.source), protected, writing=mount.writable)
        if hit is not None:
            how = "writable, " if hit.writes_only else ""
            return (f"sandbox.mounts.{index}.path ({mount.target}, {how}resolved "
                    f"{mount.source}) reaches {hit.what} at {hit.path}")
    for argument in grant.arguments:
        for index, glob in enumerate(argument.globs):
            prefix, _ = literal_prefix(glob)
            hit = _overlap(prefix, protected, writing=False)
            if hit is not None:
                return (f"arguments.{argument.name}.paths.{index} ({glob}) reaches {hit.what} "
                        f"at {hit.path}")
    return None


def _overlap(path: str, protected: tuple[Protected, ...], *, writing: bool) -> Protected | None:
    """The protected entry ``path`` reaches that names it best: of those it lies in, the
    deepest (the toolkit's package rather than the Python path it lies on); else the first it
    covers."""
    kept = [entry for entry in protected if writing or not entry.writes_only]
    inside = [entry for entry in kept if _under(path, entry.path)]
    if inside:
        return max(inside, key=lambda entry: len(entry.path))
    return next((entry for entry in kept if _under(entry.path, path)), None)


def _under(path: str, directory: str) -> bool:
    return Path(path).is_relative_to(directory)
