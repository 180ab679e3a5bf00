"""Entries copied from the host: a path with every symlink on its way, a directory tree, and
the shared libraries a binary needs (as ``ldd`` reports them).

Copying a path "faithfully" matters on merged-/usr systems: ``/lib64/ld-linux-x86-64.so.2`` is
reached through ``/lib64 -> usr/lib64`` and another link, and the image must answer the same
path the binaries have baked in.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ._entries import Directory, Entry, File, Symlink

_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def host_path(path: str) -> list[Entry]:
    """``path`` as the host resolves it: each symlink met on the way, then the file or (empty)
    directory it lands on, with the host's permission bits."""
    out: list[Entry] = []
    _follow(os.path.normpath(path), out, depth=0)
    return out


def _follow(path: str, out: list[Entry], depth: int) -> None:
    if depth > 40:
        raise ValueError(f"{path}: too many levels of symbolic links")
    parts = path.strip("/").split("/")
    current = ""
    for index, part in enumerate(parts):
        current += "/" + part
        if os.path.islink(current):
            target = os.readlink(current)
            out.append(Symlink(current, target))
            landed = os.path.normpath(os.path.join(os.path.dirname(current), target))
            rest = "/".join(parts[index + 1 :])
            _follow(landed + ("/" + rest if rest else ""), out, depth + 1)
            return
    info = os.stat(current)
    if stat.S_ISDIR(info.st_mode):
        out.append(Directory(current, stat.S_IMODE(info.st_mode)))
    else:
        out.append(File(current, source=Path(current), mode=stat.S_IMODE(info.st_mode)))


def host_tree(root: str, *, skip: Iterable[str] = ()) -> list[Entry]:
    """Everything below the directory ``root`` (its path resolved first), skipping the named
    subdirectories of ``root`` and anything that is not a file, directory or symlink."""
    entries = host_path(root)
    real_root = os.path.realpath(root)
    skipped = {os.path.join(real_root, name) for name in skip}
    for directory, dirs, files in os.walk(real_root):
        dirs[:] = sorted(d for d in dirs if os.path.join(directory, d) not in skipped)
        for name in dirs + sorted(files):
            full = os.path.join(directory, name)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                entries.append(Symlink(full, os.readlink(full)))
            elif stat.S_ISDIR(info.st_mode):
                entries.append(Directory(full, stat.S_IMODE(info.st_mode)))
            elif stat.S_ISREG(info.st_mode):
                entries.append(File(full, source=Path(full), mode=stat.S_IMODE(info.st_mode)))
    return entries


def shared_libraries(binaries: Iterable[str]) -> list[str]:
    """The sorted, distinct library paths (loader included) that ``ldd`` lists for binaries."""
    found: set[str] = set()
    for binary in binaries:
        done = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            continue  # a static binary, or not an ELF file: nothing to add
        found.update(_LDD_PATH.findall(done.stdout))
    # glibc loads libgcc_s.so.1 with dlopen when a thread exits or is cancelled; ldd cannot see
    # it, and without it such a program aborts ("libgcc_s.so.1 must be installed for
    # pthread_exit to work"), as the toolkit's proxy bridge did in the podman sandbox.
    for libc in [path for path in found if path.endswith("/libc.so.6")]:
        companion = os.path.join(os.path.dirname(libc), "libgcc_s.so.1")
        if os.path.exists(companion):
            found.add(companion)
    return sorted(found)
