"""The directories the local stack's grants mount writable, ready for the tool that writes them.

A tool never runs as root: as root, brokerd runs it as ``[broker] sandbox_uid`` (a dedicated uid
owning no files), so a grant that writes ``~/inbox`` works only once that directory is the
sandbox uid's (docs/grants.md, "What a grant does not cover"). ``bxctl up`` makes each such
directory that is missing, and as root gives it to that uid; a directory that exists is the
owner's and is left alone, with a line saying why a write there would fail. Not root, the tool
is the owner's own uid in a user namespace and the directory is made as the owner's.

Only ``[sandbox] mounts`` with ``write = true`` count; ``~/`` is the home brokerd runs with (the
owner's, in the local stack). A grant file that does not parse is brokerd's to report.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path


def writable_mounts(grants: Path, home: Path) -> list[Path]:
    """Every directory a grant in ``grants`` mounts writable, ``~/`` taken as ``home``."""
    found: list[Path] = []
    for file in sorted(grants.glob("*.toml")):
        try:
            grant = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        sandbox = grant.get("sandbox")
        mounts = sandbox.get("mounts", []) if isinstance(sandbox, dict) else []
        for mount in mounts if isinstance(mounts, list) else []:
            if not isinstance(mount, dict) or mount.get("write") is not True:
                continue
            path = mount.get("path")
            if isinstance(path, str) and (path.startswith("~/") or path.startswith("/")):
                target = home / path[2:] if path.startswith("~/") else Path(path)
                if target not in found:
                    found.append(target)
    return found


def prepare_writable_mounts(grants: Path, sandbox_uid: int, home: Path | None = None
                            ) -> list[str]:
    """Make each missing writable mount (as root: the sandbox uid's, mode 0700); returns one
    line per directory for ``bxctl up`` to print."""
    root = os.geteuid() == 0
    said: list[str] = []
    for directory in writable_mounts(grants, home or Path.home()):
        if directory.exists():
            if root and directory.stat().st_uid != sandbox_uid:
                said.append(f"grants: {directory} is not sandbox_uid {sandbox_uid}'s: a tool "
                            f"can write there only if that uid may (chown {sandbox_uid} it)")
            continue
        if not directory.parent.is_dir():
            said.append(f"grants: {directory} not made: {directory.parent} does not exist")
            continue
        directory.mkdir(mode=0o700)
        if root:
            os.chown(directory, sandbox_uid, sandbox_uid)
        owner = f"sandbox_uid {sandbox_uid}" if root else "you"
        said.append(f"grants: made {directory} for writes by {owner}")
    return said
