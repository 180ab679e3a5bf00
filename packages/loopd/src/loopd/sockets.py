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
from pathlib import Path

from bxcore.config import Config
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

from .sessions import Sessions

log = logging.getLogger("loopd")

TURN_READ_TIMEOUT = 30.0  # seconds for a channel to send its turn after connecting
EVENT_WRITE_TIMEOUT = 30.0  # seconds for a channel to take one event frame
StartupCheck = Callable[[], Awaitable[tuple[bool, str]]]
Built = Callable[[], Awaitable[Sessions]]  # the sessions, built once the checks passed


async def serve(config: Config, source: Path, checks: StartupCheck, sessions: Built) -> int:
    """The real thing: ``run`` until SIGTERM or SIGINT. Returns the exit status."""
    notifier = Notifier()
    status = 0

    async def main() -> None:
        nonlocal status
        status = await run(config, source, checks, sessions, notifier=notifier)

    await run_until_signalled(main(), on_stop=notifier.stopping)
    return status


async def run(config: Config, source: Path, checks: StartupCheck, sessions: Built, *,
              notifier: Notifier | None = None, stop: asyncio.Event | None = None) -> int:
    """Check, build the sessions, then serve them until cancelled (by ``serve``'s signal
    handling) or until ``stop`` is set. Returns the exit status: 1 if a check failed.
    ``source`` (the config file) names it in errors."""
    served = config.served("loop")
    group = served.gid(source)
    remove_stale_socket(served.path)  # before the checks: clients see "not running" meanwhile
    ok, report = await checks()
    print(report, file=sys.stderr)
    if not ok:
        print("loopd: the self-test failed; not starting", file=sys.stderr)
        return 1
    async with listening(served.path, handler(await sessions()), mode=served.mode, group=group):
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
