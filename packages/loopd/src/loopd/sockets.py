"""loop.sock: channels drive turns, one connection per turn (docs/design.md, channel protocol).

The channel sends one ``turn``; loopd answers with ``turn_event`` frames in order and one final
frame, ``turn_done`` or ``error`` (sessions.py's answer or error, mapped by
bxcore.daemon.answering). Each connection is its own asyncio task.

``serve`` orders the start for channels: a stale socket file is removed first, so while the
self-test runs a client sees "not running" rather than "connection refused"; the socket is bound
(``[channel] mode`` and ``group``, 0600 by default, through bxcore.daemon) only after every check
passed, and READY=1 goes to systemd only after it is bound. SIGTERM cancels the serving
coroutine, which closes the listener and removes the socket on its way out.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable

from bxcore.daemon import (
    Connection,
    Handler,
    Notifier,
    answering,
    listening,
    remove_stale_socket,
    run_until_signalled,
    wait_forever,
)
from bxcore.errors import LocalProtocolError, StreamEnded, StreamTimeout
from bxcore.frames import Frame
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn, TurnEvent, TurnEventBody

from . import wiring
from .budget import TokenCounter
from .checks import startup_checks
from .inference.api import Inference
from .inference.budget import ServerTokens
from .inference.client import InferenceClient
from .inference.passed import PASSED_PROBES, PassedProbes
from .inference.serving import fetch_serving
from .sessions import Sessions
from .store import SessionStore
from .wiring import LoopParts, ServingSource

log = logging.getLogger("loopd")

TURN_READ_TIMEOUT = 30.0  # seconds for a channel to send its turn after connecting
EVENT_WRITE_TIMEOUT = 30.0  # seconds for a channel to take one event frame
StartupCheck = Callable[[], Awaitable[tuple[bool, str]]]


async def serve(parts: LoopParts, client: InferenceClient) -> int:
    """The real thing: ``run`` with the inference client over inferproxy's socket, until
    SIGTERM or SIGINT. Returns the exit status."""
    notifier = Notifier()
    status = 0

    async def main() -> None:
        nonlocal status
        passed = PassedProbes(SessionStore(parts.config.paths.home).root / PASSED_PROBES)
        status = await run(parts, client,
                           lambda: startup_checks(client, parts.baselines, passed),
                           notifier=notifier, serving=lambda: fetch_serving(client),
                           counter=ServerTokens(client))

    try:
        await run_until_signalled(main(), on_stop=notifier.stopping)
    finally:
        await client.aclose()
        await parts.memory.aclose()
    return status


async def run(
    parts: LoopParts, inference: Inference, checks: StartupCheck, *,
    notifier: Notifier | None = None, stop: asyncio.Event | None = None,
    serving: ServingSource | None = None, counter: TokenCounter | None = None,
) -> int:
    """Check, then serve until cancelled (by ``serve``'s signal handling) or until ``stop`` is
    set. Returns the exit status: 1 if a check failed.

    ``serving`` reads the server's serving settings: once at start, for the per-slot context
    compaction needs when ``[inference.serving] per_slot_context`` is not set, and to name what
    changed since the latest session began; then for each new session's record. ``counter``
    counts every new baseline against the budget (budget.py): the server's tokenizer."""
    served = parts.config.served("loop")
    group = served.gid(parts.source)
    remove_stale_socket(served.path)  # before the checks: clients see "not running" meanwhile
    ok, report = await checks()
    print(report, file=sys.stderr)
    if not ok:
        print("loopd: the self-test failed; not starting", file=sys.stderr)
        return 1
    sessions = await wiring.sessions(parts, inference, serving, counter)
    async with listening(served.path, handler(sessions), mode=served.mode, group=group):
        (notifier or Notifier()).ready(f"serving {served.path}")
        log.info("serving on %s", served.path)
        if stop is None:
            await wait_forever()
        await stop.wait()
    return 0


def handler(sessions: Sessions) -> Handler:
    """loop.sock's connection handler: read the channel's turn, run it, answer (or its error:
    bxcore.daemon.answering)."""

    async def answer(frame: Frame, conn: Connection) -> Frame:
        done = await sessions.run(frame.parse(Turn), _Channel(conn).send)
        return Frame.of(wire.TURN_DONE, done, final=True)

    return answering(answer, receives=wire.TO_LOOPD, sends=wire.FROM_LOOPD, log=log,
                     timeout=TURN_READ_TIMEOUT)


class _Channel:
    """Events to one channel. A channel that went away gets no more events; its turn runs on,
    so what it appended is whole."""

    def __init__(self, conn: Connection):
        self._conn = conn
        self._gone = False

    async def send(self, event: TurnEventBody) -> None:
        if self._gone:
            return
        frame = Frame.of(wire.TURN_EVENT, TurnEvent(event=event), final=False)
        try:
            await self._conn.send(frame, timeout=EVENT_WRITE_TIMEOUT)
        except LocalProtocolError as exc:  # ours, not the channel's: the turn runs on
            log.error("our bug, not the channel's: an event was not sent: %s", exc, exc_info=exc)
        except (StreamEnded, StreamTimeout) as exc:
            log.info("channel stopped taking events: %s", exc)
            self._gone = True
