"""Closing the calls the audit log holds open (brokerd.audit.opencalls): allowed, and no result.

The runner audits every call it runs, a cancelled one too. What is left open is a call brokerd
stopped before the runner had it (between its allowing decision and its start), or one whose
brokerd was SIGKILLed, crashed or lost power. ``brokerd serve`` closes the first kind once its
calls have ended at a stop, and the second at its next start, before it serves: each gets a
``failed`` result record saying brokerd stopped while it ran, and its session's taint is
raised to all the call may have seen, since what it gave back is unknown: its grant's result
label (as the grant reads now) joined with the labels of the grant's mounts, or secret and
untrusted when that grant is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from bxcore.tools import DataClass
from bxcore.util import sha256

from .audit import AuditLog
from .audit.opencalls import OpenCall
from .errors import AuditError, TaintError
from .grantstore import GrantStore
from .labels import Label, seen
from .taint import TaintStore

log = logging.getLogger("brokerd.unfinished")

FOUND_AT_START = ("brokerd stopped while the call ran (found at the next start: brokerd was "
                  "killed, crashed or lost power); what the call did is unknown")
STOPPED_BEFORE_END = "brokerd stopped before the call ended; what it did is unknown"
UNKNOWN = Label(DataClass.SECRET, True)


class Unfinished:
    def __init__(self, audit: AuditLog, taints: TaintStore, grants: GrantStore,
                 labels: Callable[[], Mapping[str, Label]]):
        self._audit = audit
        self._taints = taints
        self._grants = grants
        self._labels = labels

    def label_of(self, call: OpenCall) -> Label:
        """All that ``call`` may have seen: its grant's result label and its mounts' labels."""
        grant = next((g for g in self._grants.current() if g.name == call.grant), None)
        if grant is None:
            return UNKNOWN
        mounts = (str(m.source) for m in grant.mounts)
        return Label(grant.result_class, bool(grant.hosts)).join(seen(self._labels(), mounts))

    async def close(self, calls: Iterable[OpenCall], why: str) -> int:
        """A failed result for each of ``calls``, and its session's taint raised; how many.

        A full disk does not stop brokerd from starting or stopping: a result that cannot be
        audited leaves its call open (the next start, or stop, closes it), and a taint that
        cannot be written is owed (brokerd.taint: no call of that session runs until it is
        written, and the audited result lets the next start raise it); each is logged."""
        closed = 0
        for call in calls:
            label = self.label_of(call)
            log.warning("call %s/%s (%s) had no result: %s; audited as failed, %s",
                        call.session, call.call, call.tool, why, label.describe())
            try:
                await self._audit.result(
                    session=call.session, call=call.call, tool=call.tool, status="failed",
                    untrusted=label.untrusted, truncated=False,
                    content_sha256=sha256(why.encode("utf-8")), reason=why,
                    **{"class": label.data_class})
            except AuditError as exc:
                log.error("call %s/%s stays open: %s", call.session, call.call, exc)
                self._owe(call.session, label)
                continue
            self._owe(call.session, label)
            closed += 1
        return closed

    def _owe(self, session: str, label: Label) -> None:
        try:
            self._taints.record(session, label.data_class, label.untrusted)
        except TaintError as exc:
            log.error("%s; no call of session %s runs until it can be", exc, session)
