"""The recall index (disposable) and memoryd's kept state, both SQLite under ``index/``."""

from .state import StateDb
from .store import RecallIndex, Row, fts_query, read_log, session_logs

__all__ = ["RecallIndex", "Row", "StateDb", "fts_query", "read_log", "session_logs"]
