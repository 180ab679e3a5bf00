"""Free room on a filesystem, of bytes and of inodes, and what a write finds short of the reserve
kept there for brokerd's audit log (``[broker] audit_reserve_bytes`` and
``audit_reserve_inodes``). Pure but for one ``statvfs``: brokerd checks a call that can write to
the audit log's filesystem with it (brokerd.audit.space), memoryd a memory write
(docs/decisions/memory-writes-keep-the-reserve.md). The texts name the settings and no host
path: the model reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple


class Room(NamedTuple):
    bytes: int
    inodes: int
    counted: bool  # whether the filesystem counts inodes at all (btrfs does not)


def free_room(path: Path) -> Room:
    """What an unprivileged writer may still use where ``path`` is (``f_bavail``, ``f_favail``)."""
    stats = os.statvfs(path)
    return Room(stats.f_bavail * stats.f_frsize, stats.f_favail, stats.f_files > 0)


def mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def shortfall(room: Room, reserve: int, inodes: int, *, needed: int = 0, needed_inodes: int = 0,
              what_writes: str = "this call writes") -> list[str]:
    """What ``room`` is short of: fewer than ``reserve`` bytes beside the ``needed`` a write
    takes, or fewer than ``inodes`` inodes beside its ``needed_inodes`` (on a filesystem that
    counts inodes). One phrase per reserve short; none when there is room (or no reserve)."""
    short = []
    if reserve > 0 and room.bytes < reserve + needed:
        short.append(f"{mib(room.bytes)} free, less than the {mib(reserve)} kept for the log "
                     "([broker] audit_reserve_bytes)" +
                     (f" plus the {mib(needed)} {what_writes}" if needed else ""))
    if inodes > 0 and room.counted and room.inodes < inodes + needed_inodes:
        short.append(f"{room.inodes} free inodes (files), fewer than the {inodes} kept for the "
                     "log ([broker] audit_reserve_inodes)")
    return short
