"""The shell around grant parsing: reads the owner's grants directory, and re-reads it when it
changes, so every call is decided against the grants as they are at that moment.

brokerd only ever reads this directory. A file that fails to parse is logged loudly and grants
nothing; the other files still count. Only ``*.toml`` files are grants: an editor's backup or a
README beside them is ignored.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._files import read_text, toml_files
from .errors import GrantError
from .policy import Grant, parse_grant

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


def read_grant(path: Path) -> Grant:
    text = read_text(path, MAX_GRANT_FILE, GrantError, "a grant")
    return parse_grant(text, path, home=home(), resolve=real_path)


def load_grants(directory: Path) -> GrantSet:
    """Every ``*.toml`` grant in ``directory``; broken files are in ``errors`` and grant nothing."""
    grants: list[Grant] = []
    errors: list[GrantError] = []
    for path in toml_files(directory, GrantError, "grants"):
        try:
            grants.append(read_grant(path))
        except GrantError as exc:
            errors.append(exc)
    return GrantSet(tuple(grants), tuple(errors))


class GrantStore:
    """The grants in force. ``current()`` re-reads the directory when any file in it changed."""

    def __init__(self, directory: Path):
        self.directory = directory
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
            grants = load_grants(self.directory)
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


def resolve_paths(arguments: Mapping[str, Any], names: frozenset[str]) -> dict[str, str]:
    """The resolved form of each named argument that is an absolute path string; the rest are
    left out, and a grant constraining them by path does not match. A path the host cannot
    name (a NUL, text that is not Unicode) is left out too: resolving never raises."""
    resolved = {}
    for name in names:
        value = arguments.get(name)
        if isinstance(value, str) and value.startswith("/") and "\0" not in value:
            try:
                resolved[name] = real_path(value)
            except (ValueError, OSError):  # UnicodeEncodeError is a ValueError
                continue
    return resolved
