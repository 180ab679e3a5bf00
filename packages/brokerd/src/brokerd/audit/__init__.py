"""The hash-chained audit log: one record per decision (denials included) and one per result."""

from .log import AuditLog, entries, log_files, verify
from .records import GENESIS, DecisionEntry, ResultEntry
from .verify import BadLink, Head

__all__ = ["GENESIS", "AuditLog", "BadLink", "DecisionEntry", "Head", "ResultEntry", "entries",
           "log_files", "verify"]
