"""The hash-chained audit log: one record per decision (denials included), one per result, and
one per request refused before a decision could be made, and one each time the owner lowers
a mount's label."""

from .log import AuditLog, entries, log_files, verify
from .records import (
    GENESIS,
    DecisionEntry,
    LabelEntry,
    RefusedEntry,
    ResultEntry,
    taint_marks,
)
from .verify import BadLink, Head

__all__ = [
    "GENESIS",
    "AuditLog",
    "BadLink",
    "DecisionEntry",
    "Head",
    "LabelEntry",
    "RefusedEntry",
    "ResultEntry",
    "entries",
    "log_files",
    "taint_marks",
    "verify",
]
