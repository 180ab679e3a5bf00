"""Honcho v3: the client, the dialectic stream decoder, and the sync of finished turns.

The client (``memoryd.honcho.client``) is not imported here: it brings the HTTP client, which
memoryd needs only with a [memory.honcho] section, and its owner's commands never."""

from .sse import ChatStreamDecoder
from .sync import Collected, HonchoSync, Outgoing, SyncReport, turns_to_write

__all__ = ["ChatStreamDecoder", "Collected", "HonchoSync", "Outgoing", "SyncReport",
           "turns_to_write"]
