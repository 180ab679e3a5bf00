"""The identity snapshot of an epoch: soul.md, memory.md and user.md as the baseline shows them.

Each file is checked again here (the sanitizer and its limit), because soul.md is written by the
owner by hand and any file may have been edited outside memoryd. A file that fails is withheld,
with the reason, rather than put into the prompt. Snapshots are frozen per (session, epoch): a
write made during an epoch reaches the prompt only in the next one.
"""

from __future__ import annotations

import logging

from bxcore.protocol.memory import IDENTITY_ORDER, IdentityFile, IdentitySnapshot
from bxcore.sanitizer import Refused, check

from .layout import IDENTITY_LIMITS, Layout, read_text

log = logging.getLogger("memoryd.identity")


def identity_file(name: str, text: str) -> IdentityFile:
    text = text.strip()
    limit = IDENTITY_LIMITS[name]
    withheld = None
    if len(text) > limit:
        withheld = f"{name} is {len(text):,} characters, over its limit of {limit:,}"
    else:
        verdict = check(text)
        if isinstance(verdict, Refused):
            # The reason can quote what was refused (markup, an instruction): it goes to the
            # owner's log, never into the prompt. The prompt gets only the rule and position.
            log.warning("identity file %s withheld: %s", name, verdict.describe())
            withheld = f"{name} failed the sanitizer ({verdict.rule}) at character " \
                f"{verdict.position}; the owner can see why in memoryd's log"
    return IdentityFile(
        name=name,  # type: ignore[arg-type]
        text="" if withheld else text, limit=limit, used=len(text), withheld=withheld,
    )


def read_snapshot(layout: Layout, session: str, epoch: int) -> IdentitySnapshot:
    files = [identity_file(name, read_text(layout.identity(name))) for name in IDENTITY_ORDER]
    return IdentitySnapshot(session=session, epoch=epoch, files=files)


class SnapshotCache:
    """The snapshot each (session, epoch) was given, so asking twice gives the same answer.

    Kept in memory: loopd writes the baseline (with the snapshot in it) to its own
    ``<epoch>.baseline.json``, which is the durable copy replay uses.
    """

    def __init__(self, layout: Layout):
        self._layout = layout
        self._snapshots: dict[str, IdentitySnapshot] = {}

    def get(self, session: str, epoch: int) -> IdentitySnapshot:
        current = self._snapshots.get(session)
        if current is None or current.epoch != epoch:
            current = read_snapshot(self._layout, session, epoch)
            self._snapshots[session] = current  # only the newest epoch of a session is kept
        return current
