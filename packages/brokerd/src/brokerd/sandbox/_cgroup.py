"""A per-call cgroup v1 ``pids`` group, for when brokerd runs as root.

A root brokerd's sandbox runs as ``sandbox_uid`` with no user namespace, where RLIMIT_NPROC
counts every process of that uid on the host (concurrent calls share it), so a root brokerd
also limits each sandbox's processes with ``pids.max``, where it can write the v1 pids
hierarchy (measured on the build machine: cgroup v1 hybrid, root may create groups). The
process joins the group before it execs bwrap, so nothing it starts escapes the count. cgroup
v2 delegation is not handled here: there a non-root brokerd relies on RLIMIT_NPROC inside the
sandbox's user namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from ._pidns import LEFTOVER_WAIT_S, WARN_EVERY_S

log = logging.getLogger("brokerd.sandbox")
PIDS_V1 = Path("/sys/fs/cgroup/pids")
REMOVE_POLL_S = 0.001


def pids_cgroup_available(base: Path = PIDS_V1) -> bool:
    return (base / "cgroup.procs").is_file() and os.access(base, os.W_OK)


class PidsCgroup:
    def __init__(self, name: str, max_pids: int, base: Path = PIDS_V1):
        self.path = base / "boxmaker" / name
        self.path.mkdir(parents=True)
        (self.path / "pids.max").write_text(f"{max_pids}\n")

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the group: a shell joins it, then execs the command."""
        join = 'echo $$ > "$0" && exec "$@"'
        return ["/bin/sh", "-c", join, str(self.path / "cgroup.procs"), *argv]

    async def remove(self) -> None:
        """Remove the group once it is empty: a moment after its last process is reaped (the
        sandbox's PID namespace is empty by then: ``_pidns``). Polled every millisecond, never
        given up: a group that stays busy is logged every WARN_EVERY_S, and the call's answer
        waits; brokerd's other calls keep running meanwhile."""
        polls = 0
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                polls += 1
                if polls % round(WARN_EVERY_S / REMOVE_POLL_S) == 0:
                    log.warning("%s still holds processes %.0f s after its call ended",
                                self.path, polls * REMOVE_POLL_S)
                await asyncio.sleep(REMOVE_POLL_S)


def kill_leftovers(owner: str, base: Path = PIDS_V1) -> list[str]:
    """Kill every process left in this brokerd's call groups (``boxmaker/<owner>/call-*``: a
    SIGKILLed brokerd's sandboxes, bwrap's setup process among them, which ``--die-with-parent``
    does not yet cover) and remove the groups: at start, before any call. Their names. OSError
    when a group cannot be emptied or removed: brokerd does not start then."""
    names = []
    for group in sorted((base / "boxmaker" / owner).glob("call-*")):
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while (group / "cgroup.procs").read_text().strip():
            if time.monotonic() > deadline:
                raise OSError(f"{group}: its processes did not end after SIGKILL")
            time.sleep(0.01)
        group.rmdir()
        names.append(group.name)
    with contextlib.suppress(OSError):  # absent, or not empty: a call group is made below it
        (base / "boxmaker" / owner).rmdir()
    return names
