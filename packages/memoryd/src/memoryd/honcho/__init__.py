"""Honcho v3: the client, the dialectic stream decoder, and the sync of finished turns."""

from .client import HonchoClient
from .sse import ChatStreamDecoder
from .sync import Collected, HonchoSync, Outgoing, SyncReport, turns_to_write

__all__ = ["ChatStreamDecoder", "Collected", "HonchoClient", "HonchoSync", "Outgoing",
           "SyncReport", "turns_to_write"]
