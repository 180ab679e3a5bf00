"""Scratch directories in memory, for property tests whose every example writes a store
durably (a session's log, a memory note): on /dev/shm where it is a tmpfs, so each ``fsync`` and
each removal costs nothing (on this machine's disk they were nine tenths of such an example: a
whole loopd turn 55 ms on disk, 1.7 ms on the tmpfs). What these tests judge (the requests, the
parses, the records) never depends on the bytes reaching a disk; the tests of durability itself
(crash points, full disks) keep their own directories. Without a writable tmpfs there, the
default temp directory.

    with scratch_dir() as home:
        ...
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

SHM = "/dev/shm"


@functools.cache
def in_memory() -> str | None:
    """/dev/shm if it is a tmpfs this process may write in, else None (the default)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    tmpfs = any(line.split()[1:3] == [SHM, "tmpfs"] for line in mounts)
    return SHM if tmpfs and os.access(SHM, os.W_OK | os.X_OK) else None


@contextlib.contextmanager
def scratch_dir(prefix: str = "bx-scratch-") -> Iterator[Path]:
    """A new directory in memory, removed with what it holds when the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=in_memory()) as directory:
        yield Path(directory)
