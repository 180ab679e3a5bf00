"""Room for the record: a call that can write to the filesystem the audit log is on is not run
while that filesystem has less than a reserve free (``[broker] audit_reserve_bytes``).

A tool with a writable mount on the state filesystem could otherwise fill it and take the
bytes the log needs to record the calls after it. The check is made before each such call. A
tool that fills the disk during its own run is not stopped by it, so the log also holds room of
its own: ``audit/reserve``, a file of HELD_BYTES allocated at start. When an append finds the
disk full (it fails with ENOSPC, or leaves less than FULL_BELOW free), the file is removed and
the append made again in the room it leaves: enough for the running calls' results and their
sessions' taint, while the next check refuses the calls that could fill it. The file is
allocated again once the reserve is free beside it. An append that
fails even so is cut back (brokerd.audit.log), so the log stays whole either way. "The same
filesystem" is the same device number (``st_dev``); bind mounts share it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import AuditError

HELD_BYTES = 4 * 1024 * 1024  # at most: about 64 records at their bound, 10,000 of 400 bytes
FULL_BELOW = 1024 * 1024  # free bytes under which the disk counts as full and the room is freed

log = logging.getLogger("brokerd.audit")


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None  # a mount that is not there cannot be written through


def refuse_when_low(state: Path, writable: Iterable[Path], reserve: int) -> None:
    """Raise AuditError when one of ``writable`` is on the filesystem of ``state`` and less
    than ``reserve`` bytes are free there (as an unprivileged writer sees it: ``f_bavail``).
    The message names no host path: the model reads it."""
    if reserve <= 0:
        return
    device = _device(state)
    shared = [path for path in writable if device is not None and _device(path) == device]
    if not shared:
        return
    try:
        free = free_bytes(state)
    except OSError as exc:
        raise AuditError(f"not run: the free space of brokerd's state filesystem cannot be "
                         f"read ({exc.strerror})") from None
    if free < reserve:
        log.error("a call that can write to %s refused: %d bytes free on the state "
                  "filesystem, below the reserve of %d", shared[0], free, reserve)
        raise AuditError(
            f"not run: it can write to the filesystem that holds brokerd's audit log, which "
            f"has {_mib(free)} free, less than the {_mib(reserve)} kept for the log "
            "([broker] audit_reserve_bytes); free space there and call again")


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class HeldRoom:
    """``<audit>/reserve``: room the log keeps for itself on a disk a tool may fill, of
    ``min(reserve, HELD_BYTES)`` bytes (none when the reserve is 0). Its methods do I/O and
    never raise: holding is best effort, and a log without it still cuts back a failed append."""

    def __init__(self, directory: Path, reserve: int):
        self.path = directory / "reserve"
        self.size = min(reserve, HELD_BYTES)
        self._reserve = reserve
        self.missing = self.size > 0  # to hold (again): checked after each write

    @property
    def held(self) -> bool:
        try:
            return self.size > 0 and self.path.stat().st_size >= self.size
        except OSError:
            return False

    def hold(self) -> None:
        """Allocate the file when it is not there and the reserve stays free beside it."""
        if not self.missing:
            return
        try:
            if not self.held:
                if free_bytes(self.path.parent) < self._reserve + self.size:
                    return
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    os.posix_fallocate(fd, 0, self.size)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self.missing = False
        except OSError as exc:
            log.warning("%s: the log's room cannot be held: %s", self.path, exc.strerror)
            with contextlib.suppress(OSError):
                self.path.unlink()

    def after_write(self) -> None:
        """After each append: free the room when the disk is all but full (a tool filled it;
        the records and taint files of the calls still running need it), and hold it again
        once the reserve is free beside it."""
        if self.size <= 0:
            return
        if self.missing:
            self.hold()
            return
        try:
            full = free_bytes(self.path.parent) < FULL_BELOW
        except OSError:
            return
        if full:
            self.release()

    def release(self) -> bool:
        """Free the room for the log's next append; whether there was any to free."""
        if not self.held:
            return False
        try:
            self.path.unlink()
        except OSError as exc:
            log.error("%s: the log's room cannot be freed: %s", self.path, exc.strerror)
            return False
        self.missing = True
        log.error("the disk of %s is full: the log's held room is freed for its records; "
                  "calls that can write there are refused until space returns", self.path.parent)
        return True


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
