"""memoryd's parts, built from the config: the layout of its files, the writer, the recall index,
the kept state, the Honcho client and its sync. No socket is opened here (sockets.py binds them);
what a request does is handling.py's."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from bxcore.config import Config
from bxcore.secrets import SecretStore

from .handling import MemoryService
from .honcho import HonchoSync
from .index import RecallIndex, StateDb
from .intent import Reserve
from .journal import Journal
from .layout import Layout
from .taint import read_taint_file
from .writer import MemoryWriter

if TYPE_CHECKING:
    from .honcho.client import HonchoClient


def build(config: Config, *, honcho: HonchoClient | None = None) -> MemoryService:
    """The service over its parts; ``honcho`` replaces the configured client (tests)."""
    settings = config.memory
    layout = Layout(config.paths.home)
    layout.ensure()
    state = StateDb(layout.state_db)
    if honcho is None and settings.honcho is not None:
        honcho = honcho_client(config)
    sync = None
    if honcho is not None and settings.honcho is not None:
        sync = HonchoSync(layout, state, honcho, settings.honcho, settings.ceiling,
                          functools.partial(read_taint_file, layout.taint_files))
    return MemoryService(
        config=config, layout=layout, writer=memory_writer(config, layout),
        index=RecallIndex(layout.recall_db, layout.sessions, settings.ceiling), state=state,
        honcho=honcho, sync=sync,
    )


def memory_writer(config: Config, layout: Layout | None = None) -> MemoryWriter:
    """The one writer of the memory files (it takes the writer lock and recovers what a crash
    left)."""
    if layout is None:
        layout = Layout(config.paths.home)
        layout.ensure()
    # A session's write leaves the audit log's reserve free on the state filesystem, which
    # memoryd's home shares with brokerd's (docs/decisions/memory-writes-keep-the-reserve.md).
    reserve = Reserve(config.broker.audit_reserve_bytes, config.broker.audit_reserve_inodes)
    return MemoryWriter(layout, stage_identity_writes=config.memory.stage_identity_writes,
                        identity_ceiling=config.memory.identity_ceiling, reserve=reserve)


def journal(config: Config) -> Journal:
    """The journal, to read: no writer lock and no recovery (those are the writer's)."""
    return Journal(Layout(config.paths.home).edits)


def honcho_client(config: Config) -> HonchoClient:
    from .honcho.client import HonchoClient  # with Honcho only: see memoryd/honcho/__init__

    honcho = config.memory.honcho
    assert honcho is not None
    key = SecretStore(config.secrets).get(honcho.key_secret) if honcho.key_secret else None
    return HonchoClient(honcho.url, key, request_timeout=honcho.request_timeout,
                        chat_liveness=honcho.chat_liveness)
