"""Which path a file tool opens: the one policy matched, placed in the grant's mounts. Pure.

A file tool's ``path`` is resolved on the host (symlinks and ``..``) before ``decide`` and the
grant's globs match that resolved path. The sandbox must open exactly it, not resolve the
model's text again (a concurrent writer could have swapped a symlink in by then), so the spec
says which mount holds it and where below that mount it is (``OpenedPath``); the toolkit opens
it there following no symlink. A path in no mount of the grant, or one that two mounts' targets
hold (nested mounts: which one the sandbox shows depends on the backend's mount order), gets no
``OpenedPath``, and the tool opens nothing.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from ..sandbox.spec import Mount, OpenedPath
from ._match import glob_regex
from .grants import Grant, GrantMount

# The argument each file tool opens (the toolkit's table names it ``path`` for all four)
OPENED_ARGUMENT = {"fs.read": "path", "fs.list": "path", "fs.search": "path", "fs.write": "path"}


def opened_path(tool: str, grant: Grant, resolved: Mapping[str, str]) -> OpenedPath | None:
    """Where ``tool``'s path (``resolved`` on the host) is among ``grant``'s mounts, with the
    grant's globs for that argument; None for a tool that opens no path, or a path no mount
    holds."""
    name = OPENED_ARGUMENT.get(tool)
    path = None if name is None else resolved.get(name)
    if name is None or path is None:
        return None
    constraints = [c for c in grant.arguments if c.name == name and c.paths is not None]
    globs = tuple(glob.pattern for c in constraints for glob in c.paths or ())
    descend = tuple(dict.fromkeys(regex for c in constraints for glob in c.globs
                                  for regex in descend_regexes(glob)))
    return place(path, grant.mounts, globs, descend)


def descend_regexes(glob: str) -> list[str]:
    """Regexes of the directories a walk may enter for ``glob``: those that can hold a path it
    matches. A directory can when it matches a proper prefix of the glob's components, or the
    whole glob when that ends in ``**``: ``/n/**/*.md`` gives ``/n`` and ``/n/**``, so a walk
    under ``/n`` enters every directory; ``/n/docs/*.md`` gives ``/n`` and ``/n/docs``, so it
    enters ``docs`` only."""
    parts = glob.strip("/").split("/")
    ends = range(1, len(parts) + (parts[-1] == "**"))
    return [glob_regex("/" + "/".join(parts[:end])).pattern for end in ends]


def place(path: str, mounts: Sequence[GrantMount | Mount], globs: tuple[str, ...] = (),
          descend: tuple[str, ...] = ()) -> OpenedPath | None:
    """The resolved host ``path`` in the mount holding it (the deepest source first), or None
    when no mount holds it or a nested mount's target would hide it."""
    for mount in sorted(mounts, key=lambda m: len(str(m.source)), reverse=True):
        relative = _below(path, str(mount.source))
        if relative is None:
            continue
        inside = posixpath.join(mount.target, relative) if relative else mount.target
        if not _shadowed(inside, mount, mounts):
            return OpenedPath(root=mount.target, relative=relative, host_path=path, globs=globs,
                              descend=descend)
    return None


def _below(path: str, directory: str) -> str | None:
    """``path`` relative to ``directory`` ("" for itself), or None when it is not inside."""
    if path == directory:
        return ""
    prefix = directory.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def _shadowed(inside: str, mount: GrantMount | Mount, mounts: Sequence[GrantMount | Mount]
              ) -> bool:
    """Whether another mount's target also holds ``inside``: nested targets, where which one
    the sandbox shows depends on the backend's mount order. Such a path is opened in neither."""
    return any(other is not mount and _below(inside, other.target) is not None
               for other in mounts)
