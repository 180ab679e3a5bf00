"""The WebSocket task: connect, ping, reconnect, forward. All decisions are in events.py and
stream.py; this module only moves bytes and sleeps.

Auth is the ``Authorization`` header on the upgrade (the only way the server knows the session at
upgrade time, so the only way a resume can be loss-free). The library answers the server's
WebSocket pings; the app-level ``ping`` action goes out every ``ping_interval`` like the official
client's, and a ping still unanswered at the next one closes the socket with 4000.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable

import websockets
from bxcore.secrets import Secret
from websockets.asyncio.client import ClientConnection, connect

from .errors import MattermostError, MattermostUnavailable
from .events import Event, parse_message
from .stream import (
    CLOSE_SEQ_MISMATCH,
    Answer,
    CatchUp,
    Deliver,
    Gap,
    SequenceTracker,
    Skip,
    backoff_delay,
)

log = logging.getLogger("gatewayd.websocket")
# The library logs handshake headers (the token) and frames (DM text) at DEBUG: keep it above.
_library_log = logging.getLogger("gatewayd.websocket.library")
_library_log.setLevel(logging.INFO)

CLOSE_PING_TIMEOUT = 4000
MAX_MESSAGE = 4 * 1024 * 1024


def websocket_url(server: str, query: dict[str, str]) -> str:
    scheme, _, rest = server.partition("://")
    ws_scheme = "wss" if scheme == "https" else "ws"
    return f"{ws_scheme}://{rest}/api/v4/websocket?{urllib.parse.urlencode(query)}"


class MattermostSocket:
    def __init__(
        self,
        server: str,
        token: Secret,
        *,
        on_event: Callable[[Event], Awaitable[None]],
        on_catch_up: Callable[[], Awaitable[None]],
        reconnect_min: float = 3.0,
        reconnect_max: float = 300.0,
        ping_interval: float = 30.0,
        open_timeout: float = 30.0,
        rng: random.Random | None = None,
    ):
        self._server = server
        self._token = token
        self._on_event = on_event
        self._on_catch_up = on_catch_up
        self._reconnect = (reconnect_min, reconnect_max)
        self._ping_interval = ping_interval
        self._open_timeout = open_timeout
        self._rng = rng or random.Random()
        self.tracker = SequenceTracker()
        self.connected = asyncio.Event()
        self.connections = 0  # sockets opened so far, for tests and the status line
        self._pong = asyncio.Event()

    async def run(self) -> None:
        """Stay connected until cancelled."""
        failures = 0
        while True:
            try:
                await self._session()
                failures = 0
            except MattermostError as exc:
                log.warning("websocket: %s", exc)
            finally:
                self.connected.clear()
            failures += 1
            delay = backoff_delay(
                failures, minimum=self._reconnect[0], maximum=self._reconnect[1], rng=self._rng
            )
            log.info("websocket: reconnecting in %.1f s", delay)
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        url = websocket_url(self._server, self.tracker.resume_query())
        async with self._open(url) as ws:
            self.connections += 1
            self.connected.set()
            pinger = asyncio.create_task(self._ping(ws))
            try:
                await self._read(ws)
            finally:
                pinger.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pinger

    @contextlib.asynccontextmanager
    async def _open(self, url: str) -> AsyncIterator[ClientConnection]:
        try:
            async with connect(
                url,
                additional_headers={"Authorization": f"Bearer {self._token.reveal()}"},
                open_timeout=self._open_timeout,
                max_size=MAX_MESSAGE,
                logger=_library_log,
            ) as ws:
                yield ws
        except websockets.InvalidStatus as exc:
            raise MattermostUnavailable(
                f"upgrade refused: HTTP {exc.response.status_code}"
            ) from exc
        except (websockets.WebSocketException, OSError, TimeoutError) as exc:
            raise MattermostUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def _read(self, ws: ClientConnection) -> None:
        async for message in ws:
            action = self.tracker.receive(parse_message(message))
            if isinstance(action, Deliver):
                await self._on_event(action.event)
            elif isinstance(action, CatchUp):
                log.info("websocket: new connection %s; catching up over REST",
                         self.tracker.connection_id)
                try:
                    await self._on_catch_up()
                except MattermostError as exc:
                    # Forget the connection, so the next hello asks for a catch-up again.
                    self.tracker.connection_id = ""
                    raise MattermostUnavailable(f"catch-up failed: {exc}") from exc
            elif isinstance(action, Skip):
                log.log(logging.WARNING if action.malformed else logging.INFO,
                        "websocket: skipped %s", action.reason)
            elif isinstance(action, Gap):
                log.warning("websocket: seq gap (expected %d, got %d); resuming",
                            action.expected, action.got)
                await ws.close(CLOSE_SEQ_MISMATCH, "sequence mismatch")
                return
            elif isinstance(action, Answer):
                self._pong.set()
        log.info("websocket: closed (%s)", ws.close_code)

    async def _ping(self, ws: ClientConnection) -> None:
        seq = 0
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                seq += 1
                self._pong.clear()
                await ws.send(json.dumps({"seq": seq, "action": "ping"}))
                await asyncio.sleep(self._ping_interval)
                if not self._pong.is_set():
                    log.warning("websocket: ping %d got no answer; reconnecting", seq)
                    await ws.close(CLOSE_PING_TIMEOUT, "ping timeout")
                    return
