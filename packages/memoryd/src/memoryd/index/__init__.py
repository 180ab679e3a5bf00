"""The recall index (disposable) and memoryd's kept state, both SQLite under ``index/``."""

from .recall_index import RecallIndex, Row, fts_query, read_log, session_logs
from .state_db import StateDb

__all__ = ["RecallIndex", "Row", "StateDb", "fts_query", "read_log", "session_logs"]
