"""What goes into an image's root filesystem, and the one deterministic tar they become."""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def _clean(path: str) -> str:
    """``/usr/bin/x`` and ``usr/bin/x`` are the same entry; ``..`` and empty paths are refused."""
    cleaned = posixpath.normpath("/" + path).lstrip("/")
    if not cleaned or ".." in path.split("/"):
        raise ValueError(f"not a usable path inside an image: {path!r}")
    return cleaned


@dataclass(frozen=True)
class File:
    """A regular file: its bytes given as ``data`` or read from ``source`` at build time."""

    path: str
    data: bytes | None = None
    source: Path | None = None
    mode: int = 0o644

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _clean(self.path))
        if (self.data is None) == (self.source is None):
            raise ValueError(f"{self.path}: give exactly one of data and source")

    def content(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.source is not None
        return self.source.read_bytes()


@dataclass(frozen=True)
class Directory:
    path: str
    mode: int = 0o755

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _clean(self.path))


@dataclass(frozen=True)
class Symlink:
    path: str
    target: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _clean(self.path))


Entry = File | Directory | Symlink


def complete(entries: Iterable[Entry]) -> list[Entry]:
    """Entries sorted by path, one per path (the last given wins), with every missing parent
    directory added, so the tar never relies on a runtime creating directories."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
    for path in list(by_path):
        parent = posixpath.dirname(path)
        while parent and parent not in by_path:
            by_path[parent] = Directory(parent)
            parent = posixpath.dirname(parent)
    return [by_path[path] for path in sorted(by_path)]


def describe(entries: list[Entry]) -> bytes:
    """A stable text of every entry's kind, path, mode and content hash: the cache key's input."""
    lines = []
    for entry in entries:
        if isinstance(entry, File):
            digest = hashlib.sha256(entry.content()).hexdigest()
            lines.append(f"F {entry.mode:o} {entry.path} {digest}")
        elif isinstance(entry, Directory):
            lines.append(f"D {entry.mode:o} {entry.path}")
        else:
            lines.append(f"L {entry.path} -> {entry.target}")
    return "\n".join(lines).encode("utf-8", errors="surrogateescape")


def layer_tar(entries: list[Entry]) -> bytes:
    """The uncompressed layer: ``entries`` (already complete and sorted) as one PAX tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.path)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if isinstance(entry, File):
                data = entry.content()
                info.size = len(data)
                info.mode = entry.mode
                tar.addfile(info, io.BytesIO(data))
            elif isinstance(entry, Directory):
                info.type = tarfile.DIRTYPE
                info.mode = entry.mode
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                info.mode = 0o777
                tar.addfile(info)
    return buffer.getvalue()
