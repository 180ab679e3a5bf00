"""A session's life around its turns: a sans-I/O core (``core``) that takes events and returns
the next action; sessions.py is its shell."""

from .core import SessionCore, SessionState

__all__ = ["SessionCore", "SessionState"]
