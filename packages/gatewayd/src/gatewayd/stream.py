"""The WebSocket's sequence rules as a pure state machine: messages in, actions out.

Mattermost numbers the events of one connection 0 (``hello``), 1, 2, ... A reconnect that names
the old ``connection_id`` and the next expected ``sequence_number`` is either replayed from there
(no new ``hello``) or, when the server cannot replay, answered with a fresh ``hello`` whose
``connection_id`` differs: events were lost, so the caller catches up over REST. A ``seq`` above
the expected one is a gap (the caller closes with 4001 and resumes); one below it is a duplicate.
This mirrors the official client (``@mattermost/client`` lib/websocket.js).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .events import Event, Hello, Malformed, Reply, WsMessage

CLOSE_SEQ_MISMATCH = 4001  # the official client's close code for a sequence gap


@dataclass(frozen=True, kw_only=True)
class Deliver:
    event: Event


@dataclass(frozen=True, kw_only=True)
class CatchUp:
    """Events may have been lost (a new connection): read the channels' posts over REST."""


@dataclass(frozen=True, kw_only=True)
class Skip:
    reason: str  # a duplicate, or a malformed message; never message text
    malformed: bool = False  # the peer sent something unreadable (worth a warning)


@dataclass(frozen=True, kw_only=True)
class Gap:
    expected: int
    got: int


@dataclass(frozen=True, kw_only=True)
class Answer:
    reply: Reply


Action = Deliver | CatchUp | Skip | Gap | Answer


class SequenceTracker:
    """Holds the connection id and the next expected seq across reconnects."""

    def __init__(self) -> None:
        self.connection_id = ""
        self.next_seq = 0

    def __repr__(self) -> str:
        return f"<SequenceTracker connection_id={self.connection_id!r} next_seq={self.next_seq}>"

    def resume_query(self) -> dict[str, str]:
        """Query parameters for the next connect: resume where we stopped, if we can."""
        return {"connection_id": self.connection_id, "sequence_number": str(self.next_seq)}

    def receive(self, message: WsMessage) -> Action:
        if isinstance(message, Reply):
            return Answer(reply=message)
        if isinstance(message, Hello):
            return self._hello(message)
        if message.seq is None:
            assert isinstance(message, Malformed)
            return Skip(reason=f"malformed message: {message.reason}", malformed=True)
        if message.seq < self.next_seq:
            return Skip(reason=f"duplicate event seq {message.seq} (expected {self.next_seq})")
        if message.seq > self.next_seq:
            return Gap(expected=self.next_seq, got=message.seq)
        self.next_seq += 1
        if isinstance(message, Malformed):
            return Skip(reason=f"malformed event seq {message.seq}: {message.reason}",
                        malformed=True)
        return Deliver(event=message)

    def _hello(self, hello: Hello) -> Action:
        self.next_seq = hello.seq + 1
        if hello.connection_id and hello.connection_id == self.connection_id:
            return Skip(reason="hello on the same connection: nothing was lost")
        self.connection_id = hello.connection_id
        return CatchUp()


def backoff_delay(
    failures: int, *, minimum: float, maximum: float, rng: random.Random | None = None
) -> float:
    """Seconds to wait before reconnect number ``failures`` (1 = the first retry).

    Doubles from ``minimum`` up to ``maximum``, plus up to half again of random jitter so that a
    server restart is not met by every client at the same instant.
    """
    if failures < 1:
        return 0.0
    base = min(maximum, minimum * float(2 ** min(failures - 1, 30)))
    jitter = float((rng or random).uniform(0, base / 2))
    return min(maximum, base + jitter)
