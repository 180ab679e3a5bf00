"""Resolving a path argument beneath the mounts of the tool's grants, in one walk.

brokerd resolves a call's path arguments on the host before deciding (symlinks and ``..``).
What that resolution reads is part of the answer: a symlink a call wrote decides where the path
leads, and whether it is there decides the answer. So the walk reads only beneath one root (a
mount source, or the literal directory of a granted glob), follows a symlink only when it stays
beneath that root, gives up after 40 of them (the kernel's limit, ELOOP), never enters
``/proc`` or ``/dev/fd`` (whose links name any host process's directories and files), and
returns every entry it read with the path it reached, from the same reads: the decision
consults the labels of all of them (brokerd.policy, rule 7). A path whose text lies beneath no
root is refused on its text alone, reading nothing. docs/decisions/answers-read-beneath-mounts.md.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .labels import covers_path

MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup
PATH_MAX = 4096  # bytes, with the NUL: the kernel opens no longer path (ENAMETOOLONG)
_MAGIC = ("/proc", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr")


@dataclass(frozen=True)
class Resolution:
    """One walk: where it led (None when refused), every entry it read, and why it stopped."""

    path: str | None
    read: tuple[str, ...]
    refused: str | None = None


def _parts(text: str) -> list[str]:
    return [part for part in text.split("/") if part not in ("", ".")]


def _magic(path: str) -> bool:
    return any(covers_path(place, path) for place in _MAGIC)


Root = tuple[str, str]  # (how a path's text may begin, the real directory that names)


def _root_of(parts: list[str], roots: Iterable[Root]) -> tuple[str, list[str]] | None:
    """The real directory of the widest root whose text begins ``parts`` literally, and the
    rest of ``parts``; None when none does."""
    fitting = [(len(wp), real, parts[len(wp):]) for written, real in roots
               if (wp := _parts(written)) == parts[:len(wp)] and ".." not in wp]
    if not fitting:
        return None
    _, real, rest = min(fitting, key=lambda fit: fit[0])
    return real, rest


def resolve_beneath(text: str, roots: Iterable[Root]) -> Resolution:
    """``text`` resolved beneath the root among ``roots`` that its text begins with (a mount's
    target stands for its source), or refused, with every entry the walk read either way."""
    if not text.startswith("/") or "\0" in text:
        return Resolution(None, (), "it is not an absolute path")
    try:
        size = len(os.fsencode(text))
    except UnicodeEncodeError:
        return Resolution(None, (), "it is not a name the host can take")
    if size >= PATH_MAX:
        return Resolution(None, (), f"it is {size:,} bytes, longer than a path can be "
                                    f"({PATH_MAX - 1:,})")
    parts = _parts(text)
    found = _root_of(parts, roots)
    if found is None:
        return Resolution(None, (), "it is beneath no mount of a grant for this tool")
    root, pending = posixpath.normpath(found[0]), found[1]
    if _magic(root):
        return Resolution(None, (), "it is in /proc or /dev/fd")
    read = [root]
    current, links = root, 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if current == root:
                return Resolution(None, tuple(read), "'..' leads out of its mount")
            current = posixpath.dirname(current)
            continue
        candidate = posixpath.join(current, part)
        read.append(candidate)
        if _magic(candidate):
            return Resolution(None, tuple(read), "it is in /proc or /dev/fd")
        try:
            target = os.readlink(candidate)
        except (OSError, ValueError):  # not a symlink, absent, or a name the host cannot take
            current = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            return Resolution(None, tuple(read), f"more than {MAX_LINKS} symlinks (ELOOP)")
        if target.startswith("/"):
            inside = _parts(target)
            if _parts(root) != inside[:len(_parts(root))]:
                return Resolution(None, tuple(read), "a symlink on it leads out of its mount")
            current, pending[:0] = root, inside[len(_parts(root)):]
        else:
            pending[:0] = _parts(target)
    if len(os.fsencode(current)) >= PATH_MAX:
        return Resolution(None, tuple(read), f"it leads to a path longer than {PATH_MAX - 1:,} "
                                             "bytes")
    return Resolution(current, tuple(read))


def resolve_arguments(arguments: Mapping[str, Any], roots: Mapping[str, tuple[Root, ...]]
                      ) -> dict[str, Resolution]:
    """Each string argument ``roots`` names, resolved beneath its roots (one walk each)."""
    return {name: resolve_beneath(value, named) for name, named in roots.items()
            if isinstance(value := arguments.get(name), str)}
