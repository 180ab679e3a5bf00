"""The hash-chained audit log: one record per decision (denials included), one per result, and
one per request refused before a decision could be made."""

from .log import AuditLog, entries, log_files, verify
from .records import GENESIS, DecisionEntry, RefusedEntry, ResultEntry
from .verify import BadLink, Head

__all__ = ["GENESIS", "AuditLog", "BadLink", "DecisionEntry", "Head", "RefusedEntry",
           "ResultEntry", "entries",
           "log_files", "verify"]
