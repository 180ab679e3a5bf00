"""Room for the record: a call that can write to the filesystem the audit log is on is not run
while that filesystem has less than a reserve free (``[broker] audit_reserve_bytes``).

A tool with a writable mount on the state filesystem could otherwise fill it and take the
bytes the log needs to record the calls after it. The check is made before each such call;
a tool that fills the disk during its own run is stopped by the next check, and the appends it
makes fail are cut back (brokerd.audit.log), so the log stays whole either way. "The same
filesystem" is the same device number (``st_dev``); bind mounts share it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import AuditError

DEFAULT_RESERVE = 64 * 1024 * 1024

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
        stats = os.statvfs(state)
    except OSError as exc:
        raise AuditError(f"not run: the free space of brokerd's state filesystem cannot be "
                         f"read ({exc.strerror})") from None
    free = stats.f_bavail * stats.f_frsize
    if free < reserve:
        log.error("a call that can write to %s refused: %d bytes free on the state "
                  "filesystem, below the reserve of %d", shared[0], free, reserve)
        raise AuditError(
            f"not run: it can write to the filesystem that holds brokerd's audit log, which "
            f"has {_mib(free)} free, less than the {_mib(reserve)} kept for the log "
            "([broker] audit_reserve_bytes); free space there and call again")


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
