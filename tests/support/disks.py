"""Disks for the tests of a full or failing disk: a real tmpfs of a chosen size (it needs root,
as scripts/test runs), and ``FailingDisk``, which stands in for ``os.write`` and the truncates
where a test picks the byte at which the disk fails."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REAL_WRITE, REAL_TRUNCATE, REAL_FTRUNCATE = os.write, os.truncate, os.ftruncate


class FailingDisk:
    """``write`` takes at most ``chunk`` bytes a call (None: all), then, once ``budget`` bytes
    are written, fails with ``code``: a short count first, as a filling disk answers. With
    ``cut_fails``, truncating fails with EIO while the fault lasts. ``budget`` None: no fault."""

    def __init__(self, budget: int | None = None, chunk: int | None = None) -> None:
        self.budget = budget
        self.chunk = chunk
        self.code = errno.ENOSPC
        self.cut_fails = False

    def write(self, fd: int, data: bytes | memoryview) -> int:
        take = len(data) if self.chunk is None else min(len(data), self.chunk)
        if self.budget is None:
            return REAL_WRITE(fd, bytes(data[:take]))
        if self.budget <= 0:
            raise OSError(self.code, os.strerror(self.code))
        written = REAL_WRITE(fd, bytes(data[:min(take, self.budget)]))
        self.budget -= written
        return written

    def truncate(self, path: object, size: int) -> None:
        self._cut()
        REAL_TRUNCATE(path, size)  # type: ignore[arg-type]

    def ftruncate(self, fd: int, size: int) -> None:
        self._cut()
        REAL_FTRUNCATE(fd, size)

    def _cut(self) -> None:
        if self.budget is not None and self.cut_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))


@contextlib.contextmanager
def tmpfs(directory: Path, options: str) -> Iterator[Path]:
    """A real tmpfs mounted at ``directory`` (made here) with mount ``options`` (``size=``,
    ``nr_inodes=``), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (scripts/test runs as root)")
    directory.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "bx-disk", str(directory)],
                   check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


@contextlib.contextmanager
def home_on_tmpfs(disk: Path, home: Path, options: str) -> Iterator[Path]:
    """A tmpfs at ``disk`` whose ``home`` directory is bind-mounted at ``home`` (a state
    directory on the small disk, its sockets' directory elsewhere); yields ``disk``."""
    with tmpfs(disk, f"{options},mode=0755"):
        (disk / "home").mkdir()
        home.mkdir(parents=True)
        subprocess.run(["mount", "--bind", str(disk / "home"), str(home)], check=True)
        try:
            yield disk
        finally:
            subprocess.run(["umount", "-l", str(home)], check=False)
