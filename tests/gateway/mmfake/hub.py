"""The fake's WebSocket side: connections, seq numbers, the dead queue and resume.

Follows the server as described in ../shared/reference/mattermost-honcho.md section 2.4: each
connection numbers its events from 0 (hello); the last 128 sent events are kept in a dead queue;
a reconnect naming the connection and a seq still in that queue is replayed from there with no new
hello; otherwise the client gets a new connection id and a fresh hello.
"""

from __future__ import annotations

import asyncio
import collections
import json
from dataclasses import dataclass, field
from typing import Any

from .state import new_id

DEAD_QUEUE = 128
CLOSE = object()  # sentinel in an outbox: close the socket


@dataclass
class Connection:
    id: str
    user_id: str
    next_seq: int = 0
    dead: collections.deque[tuple[int, str]] = field(
        default_factory=lambda: collections.deque(maxlen=DEAD_QUEUE)
    )
    outbox: asyncio.Queue[Any] | None = None  # set while a socket is attached

    @property
    def active(self) -> bool:
        return self.outbox is not None


@dataclass
class Knobs:
    gap_next: int = 0  # skip this many seq numbers before the next event
    duplicate_next: int = 0  # send the next N events twice
    hold_next: int = 0  # hold the next N events and send them after the one that follows
    answer_pings: bool = True


class Hub:
    def __init__(self, check_frame: Any):
        self.connections: dict[str, Connection] = {}
        self.knobs = Knobs()
        self._check = check_frame
        self._held: list[tuple[Connection, str]] = []

    def attach(self, user_id: str, connection_id: str, sequence: int | None) -> tuple[
        Connection, list[str]
    ]:
        """A socket for ``user_id`` opened: resume its connection or start a new one. Returns the
        connection and the frames to send first (a replay, or a hello)."""
        old = self.connections.get(connection_id)
        if old is not None and old.user_id == user_id and sequence is not None:
            seqs = [seq for seq, _ in old.dead]
            if sequence == old.next_seq or sequence in seqs:
                old.outbox = asyncio.Queue()
                return old, [text for seq, text in old.dead if seq >= sequence]
        connection = Connection(id=new_id(), user_id=user_id)
        connection.outbox = asyncio.Queue()
        self.connections[connection.id] = connection
        hello = self._frame(connection, "hello", {
            "server_version": "10.11.0.fake.0.false", "connection_id": connection.id,
        }, {"user_id": user_id, "channel_id": ""})
        return connection, [hello]

    def detach(self, connection: Connection) -> None:
        connection.outbox = None

    def emit(self, event: str, data: dict[str, Any], channel_id: str, users: set[str]) -> None:
        """Send an event to every connection of these users, active or not (an inactive one
        keeps it in its dead queue for replay)."""
        for connection in list(self.connections.values()):
            if connection.user_id not in users:
                continue
            if self.knobs.gap_next:
                connection.next_seq += self.knobs.gap_next
            text = self._frame(connection, event, data, {"user_id": "", "channel_id": channel_id})
            self._deliver(connection, text)
        self.knobs.gap_next = 0

    def _deliver(self, connection: Connection, text: str) -> None:
        if connection.outbox is None:
            return
        if self.knobs.hold_next:
            self.knobs.hold_next -= 1
            self._held.append((connection, text))
            return
        connection.outbox.put_nowait(text)
        if self.knobs.duplicate_next:
            self.knobs.duplicate_next -= 1
            connection.outbox.put_nowait(text)
        for held_connection, held in self._held:
            if held_connection.outbox is not None:
                held_connection.outbox.put_nowait(held)
        self._held.clear()

    def _frame(
        self, connection: Connection, event: str, data: dict[str, Any], target: dict[str, str]
    ) -> str:
        broadcast = {
            "omit_users": None, "team_id": "", "connection_id": "", "omit_connection_id": "",
            **target,
        }
        frame = {"event": event, "data": data, "broadcast": broadcast, "seq": connection.next_seq}
        self._check(frame)
        text = json.dumps(frame)
        connection.dead.append((connection.next_seq, text))
        connection.next_seq += 1
        return text

    def drop(self, *, user_id: str | None = None) -> None:
        """Close every active socket (of one user): the server going away, code 1001."""
        for connection in self.connections.values():
            if connection.outbox is not None and user_id in (None, connection.user_id):
                connection.outbox.put_nowait(CLOSE)

    def forget(self) -> None:
        """A server restart: no connection can be resumed; the next connect gets a new hello."""
        self.drop()
        self.connections.clear()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        seq = request.get("seq")
        if not isinstance(seq, int) or seq <= 0:
            return {"status": "FAIL", "seq_reply": 1,
                    "error": {"id": "api.web_socket_router.bad_seq.app_error",
                              "message": "Invalid sequence number"}}
        if request.get("action") == "ping":
            return {"status": "OK", "seq_reply": seq, "data": {
                "text": "pong", "version": "10.11.0", "server_time": 0, "node_id": ""}}
        return {"status": "FAIL", "seq_reply": seq,
                "error": {"id": "api.web_socket_router.not_implemented.app_error",
                          "message": "Not implemented"}}
