"""Honcho v3: the client, the dialectic stream decoder, and the sync of finished turns."""

from .client import HonchoClient
from .sse import ChatStreamDecoder
from .sync import HonchoSync, Outgoing, SyncReport, turns_to_write

__all__ = ["ChatStreamDecoder", "HonchoClient", "HonchoSync", "Outgoing", "SyncReport",
           "turns_to_write"]
