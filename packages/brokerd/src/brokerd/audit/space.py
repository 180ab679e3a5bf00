"""Room for the record: a call that can write to the filesystem the audit log is on is not run
while that filesystem has less than a reserve free, of bytes (``[broker] audit_reserve_bytes``)
or of inodes (``[broker] audit_reserve_inodes``): a disk with bytes left and no inode takes no
new file, and a session's taint file is one. brokerd's own writes for a call count too: a
consult payload goes to the egress log on that filesystem, so it is refused the same way.

A tool with a writable mount on the state filesystem could otherwise fill it and take the
bytes the log needs to record the calls after it. The check is made before each such call. A
tool that fills the disk during its own run is not stopped by it, so the log also holds room of
its own: ``audit/reserve``, a file of HELD_BYTES allocated at start. When an append finds the
disk full (it fails with ENOSPC, or leaves less than FULL_BELOW free), the file is removed and
the append made again in the room it leaves: enough for the running calls' results and their
sessions' taint, while the next check refuses the calls that could fill it. The file is
allocated again once the reserve is free beside it. An append that
fails even so is cut back (brokerd.audit.log), so the log stays whole either way. "The same
filesystem" is the same device number (``st_dev``); bind mounts share it. The room and the
texts naming the reserves are bxcore.space's; memoryd refuses memory writes with them too.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from bxcore.space import free_room, shortfall
from bxcore.util import fsync_dir

from ..errors import AuditError

HELD_BYTES = 4 * 1024 * 1024  # at most: about 64 records at their bound, 10,000 of 400 bytes
FULL_BELOW = 1024 * 1024  # free bytes under which the disk counts as full and the room is freed
HELD_INODES = 64  # at most: the taint files of as many sessions' running calls
FULL_INODES = 16  # free inodes under which the disk counts as full

log = logging.getLogger("brokerd.audit")


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None  # a mount that is not there cannot be written through


WRITER = "it can write to the filesystem that holds brokerd's audit log"


def refuse_when_low(state: Path, writable: Iterable[Path], reserve: int, inodes: int = 0,
                    *, needed: int = 0, what: str = WRITER) -> None:
    """Raise AuditError when one of ``writable`` is on the filesystem of ``state`` and less
    than ``reserve`` bytes (plus ``needed``, what the write itself takes) or less than
    ``inodes`` inodes are free there, as an unprivileged writer sees them (``f_bavail``,
    ``f_favail``; a filesystem that counts no inodes, ``f_files`` 0, has no inode bound). The
    message says which ran out and names no host path: the model reads it. ``what``: why the
    call touches that filesystem."""
    if reserve <= 0 and inodes <= 0:
        return
    device = _device(state)
    shared = [path for path in writable if device is not None and _device(path) == device]
    if not shared:
        return
    try:
        room = free_room(state)
    except OSError as exc:
        raise AuditError(f"not run: the free space of brokerd's state filesystem cannot be "
                         f"read ({exc.strerror})") from None
    short = shortfall(room, reserve, inodes, needed=needed)
    if short:
        log.error("a call that can write to %s refused: %d bytes and %s inodes free on the "
                  "state filesystem, reserves %d and %d", shared[0], room.bytes,
                  room.inodes if room.counted else "uncounted", reserve, inodes)
        raise AuditError(f"not run: {what}, which has " + " and ".join(short) +
                         "; free space there and call again")


class HeldRoom:
    """``<audit>/reserve``: room the log keeps for itself on a disk a tool may fill, of
    ``min(reserve, HELD_BYTES)`` bytes (none when the reserve is 0), and ``<audit>/reserve.d/``:
    ``min(inodes, HELD_INODES)`` empty files, inodes kept the same way for a tool that uses up
    the inodes rather than the bytes (the taint files of the running calls need new ones). Its
    methods do I/O and never raise: holding is best effort, and a log without it still cuts
    back a failed append."""

    def __init__(self, directory: Path, reserve: int, inodes: int = 0):
        self.path = directory / "reserve"
        self.files = directory / "reserve.d"
        self.size = min(reserve, HELD_BYTES)
        self.count = min(inodes, HELD_INODES)
        self._reserve = reserve
        self._inodes = inodes
        self.missing = self.size > 0 or self.count > 0  # to hold (again): checked after writes

    @property
    def held(self) -> bool:
        try:
            return self.size > 0 and self.path.stat().st_size >= self.size
        except OSError:
            return False

    def _held_files(self) -> list[Path]:
        try:
            return sorted(self.files.iterdir())
        except OSError:
            return []

    def hold(self) -> None:
        """Allocate the file and the files when they are not there and the reserves stay free
        beside them."""
        if not self.missing:
            return
        try:
            room = free_room(self.path.parent)
            done = True
            if self.size > 0 and not self.held:
                if room.bytes < self._reserve + self.size:
                    done = False
                else:
                    fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
                    try:
                        os.posix_fallocate(fd, 0, self.size)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            if self.count > 0 and room.counted and len(self._held_files()) < self.count:
                if room.inodes < self._inodes + self.count + 1:
                    done = False
                else:
                    self.files.mkdir(mode=0o700, exist_ok=True)
                    for number in range(self.count):
                        os.close(os.open(self.files / str(number), os.O_WRONLY | os.O_CREAT,
                                         0o600))
                    fsync_dir(self.files)
            self.missing = not done
        except OSError as exc:
            log.warning("%s: the log's room cannot be held: %s", self.path, exc.strerror)
            with contextlib.suppress(OSError):
                self.path.unlink()

    def after_write(self) -> None:
        """After each append: free the room when the disk is all but full, of bytes or of
        inodes (a tool filled it; the records and taint files of the calls still running need
        it), and hold it again once the reserves are free beside it."""
        if self.size <= 0 and self.count <= 0:
            return
        if self.missing:
            self.hold()
            return
        try:
            room = free_room(self.path.parent)
        except OSError:
            return
        if room.bytes < FULL_BELOW or (room.counted and room.inodes < FULL_INODES):
            self.release()

    def release(self) -> bool:
        """Free the room for the log's next append (and the taint files after it); whether
        there was any to free."""
        freed = False
        if self.held:
            try:
                self.path.unlink()
                freed = True
            except OSError as exc:
                log.error("%s: the log's room cannot be freed: %s", self.path, exc.strerror)
        for each in self._held_files():
            with contextlib.suppress(OSError):
                each.unlink()
                freed = True
        if freed:
            self.missing = True
            log.error("the disk of %s is full: the log's held room is freed for its records; "
                      "calls that can write there are refused until space returns",
                      self.path.parent)
        return freed

