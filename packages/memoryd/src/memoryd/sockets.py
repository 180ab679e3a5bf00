"""``memoryd serve``: memory.sock ([memory] mode and group, bxcore.daemon) and
memory-owner.sock (``owner_mode``, ``owner_group``: the owner's undo, accept, reject, reindex),
READY=1 once both are bound, SIGTERM ends it.

One task group: the listeners and the Honcho sync loop (handling.py), cancelled by bxcore.daemon
on SIGTERM or SIGINT. One connection per request; each read and write has its own timeout; what
a frame asks is answered by handling.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from bxcore.config import Config
from bxcore.daemon import Notifier, listening, run_until_signalled, wait_forever
from bxcore.errors import BoxmakerError, LocalProtocolError, RemoteProtocolError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream, answer_our_bug, answer_their_fault
from bxcore.protocol.memory import (
    FROM_MEMORYD,
    FROM_MEMORYD_OWNER,
    TO_MEMORYD,
    TO_MEMORYD_OWNER,
)

from .handling import MemoryService

log = logging.getLogger("memoryd")
READ_TIMEOUT = 30.0


async def serve(service: MemoryService, config: Config, source: str | Path = "config") -> None:
    """Until SIGTERM or SIGINT; ``source`` (the config file) names it in errors."""
    served, owners = config.served("memory"), config.served("memory-owner")
    group, owners_group = served.gid(source), owners.gid(source)
    notifier = Notifier()

    async def main() -> None:
        service.catch_up()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _connection(FrameStream(reader, writer, kinds=TO_MEMORYD,
                                                sends=FROM_MEMORYD), service.handle)

        async def owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _connection(FrameStream(reader, writer, kinds=TO_MEMORYD_OWNER,
                                          sends=FROM_MEMORYD_OWNER),
                              service.handle_owner)

        async with (
            listening(served.path, connection, mode=served.mode, group=group),
            listening(owners.path, owner, mode=owners.mode, group=owners_group),
            asyncio.TaskGroup() as group_of_tasks,
        ):
            notifier.ready()
            log.info("memoryd listening on %s and %s", served.path, owners.path)
            group_of_tasks.create_task(service.sync_forever())
            await wait_forever()

    try:
        await run_until_signalled(main(), on_stop=notifier.stopping)
    finally:
        await service.aclose()


async def _connection(stream: FrameStream, handle: Callable[[Frame], Awaitable[Frame]]) -> None:
    try:
        frame = await stream.read(timeout=READ_TIMEOUT)
        answer = await handle(frame)
        await stream.write(answer)
    except LocalProtocolError as exc:  # ours: logged as a bug, the peer told ``internal``
        await answer_our_bug(stream, exc, log)
    except RemoteProtocolError as exc:  # the peer's: answered ``bad_frame``, then closed
        await answer_their_fault(stream, exc, log)
    except BoxmakerError as exc:
        log.warning("connection dropped: %s", exc)
    finally:
        await stream.close()
