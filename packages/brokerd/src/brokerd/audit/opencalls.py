"""The open calls: every call the audit log holds an allowing decision for (auto, or an ask the
owner approved) and no result yet. Pure, but for reading and writing a checkpoint.

Every allowed call must end with exactly one result record, whatever happens to brokerd. The
runner writes it when the call ends, or is cancelled because brokerd stops; what it cannot
write (brokerd stopped before the runner got the call, or was SIGKILLed, or the power went) is
closed from this set: at a clean stop for the calls still open, and at the next start, before
serving, for the calls of the previous life.

Finding them at start reads no unbounded log. Before the log's writer puts the first record into
a new file ``NNNNNNNN.jsonl`` it writes ``NNNNNNNN.open.json``, the calls open just before
that record, and fsyncs it; so the calls open at the end are that checkpoint with the newest
file's records applied (``still_open``): at most one file (``[broker] audit_rotate_bytes``),
which start-up reads already to reconcile taint. docs/decisions/open-calls.md says why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from bxcore.util import write_durably

from ..errors import AuditError
from .records import DecisionEntry, Entry, ResultEntry

Key = tuple[str, int]  # (session, call)


class OpenCall(NamedTuple):
    session: str
    call: int
    tool: str
    grant: str | None  # the grant that allowed it


Change = tuple[Key, OpenCall | None]  # opened (the call) or closed (None)


def change_of(entry: Entry) -> Change | None:
    """How one record changes the open calls: an allowing decision opens its call, a result
    closes it; every other record leaves them alone."""
    if isinstance(entry, DecisionEntry) and entry.decision.verdict == "allow":
        record = entry.decision
        return (record.session, record.call), OpenCall(record.session, record.call, record.tool,
                                                      record.grant)
    if isinstance(entry, ResultEntry):
        return (entry.session, entry.call), None
    return None


def apply(calls: dict[Key, OpenCall], change: Change | None) -> None:
    if change is None:
        return
    key, opened = change
    if opened is None:
        calls.pop(key, None)
    else:
        calls[key] = opened


def checkpoint_path(log_file: Path) -> Path:
    return log_file.with_name(f"{log_file.stem}.open.json")


def write_checkpoint(log_file: Path, calls: Mapping[Key, OpenCall]) -> None:
    """Durably, before ``log_file`` gets its first record: the calls open just before it.
    Raises OSError (the writer cuts the batch back)."""
    data = json.dumps([c._asdict() for c in calls.values()], sort_keys=True).encode("utf-8")
    write_durably(checkpoint_path(log_file), data, mode=0o640)


def read_checkpoint(log_file: Path) -> dict[Key, OpenCall]:
    """The calls open before ``log_file``'s first record; none when it has no checkpoint (the
    first file, or a log an older brokerd wrote). AuditError names a checkpoint that is not one."""
    path = checkpoint_path(log_file)
    try:
        rows = json.loads(path.read_bytes())
        calls = [OpenCall(**row) for row in rows]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError) as exc:
        raise AuditError(f"{path}: not a checkpoint of the open calls: {exc}") from None
    return {(c.session, c.call): c for c in calls}


def still_open(newest: Path | None, entries: Iterable[Entry]) -> dict[Key, OpenCall]:
    """The calls open at the end of the log: ``newest`` (its newest file)'s checkpoint with
    ``entries`` (that file's records, in order) applied."""
    calls = {} if newest is None else read_checkpoint(newest)
    for entry in entries:
        apply(calls, change_of(entry))
    return calls
