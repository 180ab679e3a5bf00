"""The slot gate: one request in flight per slot inside this process.

A session always uses its slot (docs/design.md, "Pinned slots"); two requests on one slot evict each
other's cache. A request that finds its slot held waits here, after telling the channel with
``queued {ahead}`` (how many requests of this process are in front of it) and
``waiting {slot_busy: true}``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bxcore.protocol.loop import Queued, Waiting

from .api import EventSink


class SlotGate:
    def __init__(self) -> None:
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._waiting: defaultdict[int, int] = defaultdict(int)

    def busy(self, slot: int) -> bool:
        return self._locks[slot].locked() or self._waiting[slot] > 0

    @asynccontextmanager
    async def hold(self, slot: int, events: EventSink) -> AsyncIterator[None]:
        lock = self._locks[slot]
        if lock.locked() or self._waiting[slot]:
            await events(Queued(ahead=1 + self._waiting[slot]))
            await events(Waiting(slot_busy=True))
        self._waiting[slot] += 1
        try:
            await lock.acquire()
        finally:
            self._waiting[slot] -= 1
        try:
            yield
        finally:
            lock.release()
