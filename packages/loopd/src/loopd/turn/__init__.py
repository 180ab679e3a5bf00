"""One turn of a session: a sans-I/O core (``core``) that takes events and returns the next
action, driven by a thin async shell (``shell``) that does each action's I/O."""

from .core import INTERRUPTED, TurnCore, open_calls
from .limits import REPEATED, STOPPED, TurnSettings
from .shell import Loop, record_completion, run_turn

__all__ = [
    "INTERRUPTED", "REPEATED", "STOPPED", "Loop", "TurnCore", "TurnSettings", "open_calls",
    "record_completion", "run_turn",
]
