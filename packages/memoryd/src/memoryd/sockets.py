"""``memoryd serve``: memory.sock ([memory] mode and group, bxcore.daemon) and
memory-owner.sock (``owner_mode``, ``owner_group``: the owner's undo, accept, reject, reindex),
READY=1 once both are bound, SIGTERM ends it.

One task group: the listeners and the Honcho sync loop (handling.py), cancelled by bxcore.daemon
on SIGTERM or SIGINT. One connection per request, served by bxcore.daemon.answering (which maps
every failure to its error frame); what a request asks is answered by handling.py.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from bxcore.config import Config
from bxcore.daemon import (
    Answerer,
    Connection,
    Notifier,
    answering,
    listening,
    run_until_signalled,
    wait_forever,
)
from bxcore.frames import Frame
from bxcore.protocol.memory import (
    FROM_MEMORYD,
    IDENTITY_REQUEST,
    IDENTITY_SNAPSHOT,
    TO_MEMORYD,
    TOOL_RESPONSE,
    TURN_FINISHED,
    TURN_RECORDED,
    IdentityRequest,
    MemoryCall,
    TurnFinished,
)
from bxcore.protocol.memory_owner import COMMAND_DONE, FROM_MEMORYD_OWNER, TO_MEMORYD_OWNER

from .handling import MemoryService
from .owner import parse_command

log = logging.getLogger("memoryd")


async def serve(service: MemoryService, config: Config, source: str | Path = "config") -> None:
    """Until SIGTERM or SIGINT; ``source`` (the config file) names it in errors."""
    served, owners = config.served("memory"), config.served("memory-owner")
    group, owners_group = served.gid(source), owners.gid(source)
    notifier = Notifier()
    memory, owner = answerers(service)

    async def main() -> None:
        service.catch_up_if_room()  # starts on a full disk too
        async with (
            listening(served.path, answering(memory, receives=TO_MEMORYD, sends=FROM_MEMORYD,
                                             log=log),
                      mode=served.mode, group=group),
            listening(owners.path, answering(owner, receives=TO_MEMORYD_OWNER,
                                             sends=FROM_MEMORYD_OWNER, log=log),
                      mode=owners.mode, group=owners_group),
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


def answerers(service: MemoryService) -> tuple[Answerer, Answerer]:
    """(memory.sock's, memory-owner.sock's): each request's body to ``service``, its answer back."""

    async def memory(frame: Frame, _conn: Connection) -> Frame:
        if frame.kind == TURN_FINISHED:
            recorded = service.turn_finished(frame.parse(TurnFinished))
            return Frame.of(TURN_RECORDED, recorded, final=True)
        if frame.kind == IDENTITY_REQUEST:
            snapshot = service.identity(frame.parse(IdentityRequest))
            return Frame.of(IDENTITY_SNAPSHOT, snapshot, final=True)
        response = await service.memory_call(frame.parse(MemoryCall))  # the one kind left
        return Frame.of(TOOL_RESPONSE, response, final=True)

    async def owner(frame: Frame, _conn: Connection) -> Frame:
        done = await service.owner_command(parse_command(frame))
        return Frame.of(COMMAND_DONE, done, final=True)

    return memory, owner
