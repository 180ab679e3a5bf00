"""Writing finished turns (and entries moved out of identity) to our own Honcho workspace.

What to write is derived from the files every pass, never queued: a turn is sent when it is
finished (it ends in an assistant answer without tool calls), its session had seen no untrusted
content and nothing above the ceiling by the end of that turn, and brokerd's taint file says the
session is still clean. Honcho does not de-duplicate, so the ledger in state.sqlite says what
was written; a write whose outcome is unknown (a timeout) is checked against Honcho, by listing
the session's messages and reading their ``bx_key`` metadata, before it is tried again. After an
outage the next pass simply finds more to write: that is the catch-up.

A pass reads only the sources that could give something new (reread.py): a session whose log
files and taint are as they were when a pass last read it and settled all it gave is skipped,
and so is an unchanged notes.md whose moved entries are all written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bxcore.config.memory import HonchoSection
from bxcore.records import Assistant, LogRecord, ToolResult, User
from bxcore.tools import DataClass
from bxcore.util import now_rfc3339

from ..errors import HonchoRejected, HonchoUnavailable
from ..index import StateDb, read_log, session_logs
from ..layout import Layout
from ..notes import read_notes
from ..taint import SessionTaint
from .reread import ReadCache, RereadDecision, Signature, signature

if TYPE_CHECKING:
    from .client import HonchoClient

log = logging.getLogger("memoryd.honcho")
IDENTITY_SESSION = "bx-identity"  # the Honcho session that receives moved identity entries
NOTES_SOURCE = "notes.md"  # the read cache's name for notes.md (sessions go by "session:<id>")


@dataclass(frozen=True, kw_only=True)
class Outgoing:
    key: str  # the ledger key, also sent as metadata.bx_key
    session: str  # the Honcho session
    peer: str
    content: str
    created_at: str

    def message(self) -> dict[str, Any]:
        return {"peer_id": self.peer, "content": self.content,
                "metadata": {"bx_key": self.key}, "created_at": self.created_at}


@dataclass
class SyncReport:
    written: int = 0
    found_in_honcho: int = 0
    rejected: int = 0
    outage: str | None = None
    pending: int = 0
    read: int = 0  # sources (sessions, notes.md) read this pass
    skipped: int = 0  # sources left unread: unchanged since a pass that settled them


@dataclass
class Collected:
    """One pass's reading: what to send, and what each source read gave (for the read cache)."""
    outgoing: list[Outgoing] = field(default_factory=list)
    read: dict[str, tuple[Signature, list[str]]] = field(default_factory=dict)
    skipped: int = 0

    def add(self, source: str, now: Signature, out: list[Outgoing]) -> None:
        self.outgoing += out
        self.read[source] = (now, [o.key for o in out])


def turns_to_write(session: str, logs: Sequence[tuple[int, Sequence[LogRecord]]],
                   ceiling: DataClass, owner: str, agent: str) -> list[Outgoing]:
    """The messages of the finished, clean turns of one session, epochs in order (pure)."""
    taint = SessionTaint()
    out: list[Outgoing] = []
    turn: list[Outgoing] = []
    for epoch, records in logs:
        for line, record in enumerate(records, start=1):
            key = f"{session}/{epoch}#{line}"
            if isinstance(record, ToolResult):
                taint = taint.join(record.data_class, record.untrusted)
            elif isinstance(record, User):
                turn = [Outgoing(key=key, session=session, peer=owner, content=record.content,
                                 created_at=record.time)]
            elif isinstance(record, Assistant) and not record.tool_calls and turn:
                if record.content:
                    turn.append(Outgoing(key=key, session=session, peer=agent,
                                         content=record.content, created_at=record.time))
                if not taint.untrusted and taint.data_class <= ceiling:
                    out.extend(turn)
                turn = []
    return out


class HonchoSync:
    def __init__(self, layout: Layout, state: StateDb, client: HonchoClient,
                 config: HonchoSection, ceiling: DataClass,
                 taint_of: Callable[[str], SessionTaint]):
        self._layout = layout
        self._state = state
        self._client = client
        self._config = config
        self._ceiling = ceiling
        self._taint_of = taint_of
        self._prepared: set[str] = set()
        self._verify_all = state.fresh  # a new ledger: Honcho may hold messages it forgot
        self._cache = ReadCache()  # in memory: a restart reads every source once

    def collect(self) -> Collected:
        collected = Collected()
        by_session: dict[str, list[tuple[int, Path]]] = {}
        for session, epoch, path in session_logs(self._layout.sessions):
            by_session.setdefault(session, []).append((epoch, path))
        for session, files in by_session.items():
            taint = self._taint_of(session)
            now = signature((path for _, path in files), taint)
            if self._cache.decide(f"session:{session}", now) is RereadDecision.SKIP:
                collected.skipped += 1
                continue
            out: list[Outgoing] = []
            if not taint.untrusted and taint.data_class <= self._ceiling:
                logs = [(epoch, read_log(path)) for epoch, path in files]
                out = turns_to_write(session, logs, self._ceiling, self._config.owner_peer,
                                     self._config.agent_peer)
            collected.add(f"session:{session}", now, out)
        now = signature([self._layout.notes])
        if self._cache.decide(NOTES_SOURCE, now) is RereadDecision.SKIP:
            collected.skipped += 1
        else:
            collected.add(NOTES_SOURCE, now, self._moved_notes())
        self._cache.keep_only([NOTES_SOURCE, *(f"session:{s}" for s in by_session)])
        return collected

    def _moved_notes(self) -> list[Outgoing]:
        return [Outgoing(key=f"note:{note.id}", session=IDENTITY_SESSION,
                         peer=self._config.agent_peer, content=note.text, created_at=note.time)
                for note in read_notes(self._layout.notes)
                if note.kind == "moved" and not note.untrusted
                and note.data_class <= self._ceiling]

    async def sync_once(self) -> SyncReport:
        collected = self.collect()
        report = SyncReport(read=len(collected.read), skipped=collected.skipped)
        outgoing = collected.outgoing
        done = self._state.settled(o.key for o in outgoing)
        todo = [o for o in outgoing if o.key not in done]
        uncertain = self._state.uncertain()
        try:
            if todo:
                await self._prepare_workspace()
            for session in dict.fromkeys(o.session for o in todo):
                batch = [o for o in todo if o.session == session]
                await self._write_session(session, batch, uncertain, report)
        except HonchoUnavailable as exc:
            report.outage = str(exc)
            log.warning("Honcho sync paused: %s", exc)
        else:
            self._verify_all = False
        self._remember(collected, outage=report.outage is not None)
        report.pending = len(todo) - report.written - report.found_in_honcho
        return report

    def _remember(self, collected: Collected, *, outage: bool) -> None:
        """A source read this pass is settled if every key it gave is now in Honcho by the
        ledger (not refused, not uncertain) and the pass met no outage."""
        synced = set() if outage else self._state.synced(
            key for _, keys in collected.read.values() for key in keys)
        uncertain = self._state.uncertain()
        for source, (now, keys) in collected.read.items():
            settled = not outage and all(k in synced and k not in uncertain for k in keys)
            self._cache.record(source, now, settled)

    async def _prepare_workspace(self) -> None:
        workspace = self._config.workspace
        if workspace in self._prepared:
            return
        await self._client.ensure_workspace(workspace)
        for peer in (self._config.owner_peer, self._config.agent_peer):
            await self._client.ensure_peer(workspace, peer)
        self._prepared.add(workspace)

    async def _write_session(self, session: str, batch: list[Outgoing], uncertain: set[str],
                             report: SyncReport) -> None:
        workspace = self._config.workspace
        if f"{workspace}/{session}" not in self._prepared:
            await self._client.ensure_session(workspace, session, {
                self._config.owner_peer: {"observe_me": True, "observe_others": False},
                self._config.agent_peer: {"observe_me": False, "observe_others": True},
            })
            self._prepared.add(f"{workspace}/{session}")
        if self._verify_all or any(o.key in uncertain for o in batch):
            batch = await self._drop_already_written(session, batch, report)
        size = self._config.batch
        for start in range(0, len(batch), size):
            chunk = batch[start : start + size]
            self._state.mark_uncertain(o.key for o in chunk)  # cleared once Honcho says 201
            try:
                created = await self._client.add_messages(
                    workspace, session, [o.message() for o in chunk]
                )
            except HonchoRejected as exc:
                self._state.record_rejected((o.key for o in chunk), now_rfc3339())
                report.rejected += len(chunk)
                log.error("Honcho refused %d messages of %s: %s", len(chunk), session, exc)
                continue
            self._state.record_synced(
                ((o.key, workspace, session, str(m.get("id"))) for o, m in zip(chunk, created,
                                                                               strict=True)),
                now_rfc3339(),
            )
            report.written += len(chunk)

    async def _drop_already_written(self, session: str, batch: list[Outgoing],
                                    report: SyncReport) -> list[Outgoing]:
        workspace = self._config.workspace
        present: dict[str, str] = {}
        async for message in self._client.list_messages(workspace, session):
            key = (message.get("metadata") or {}).get("bx_key")
            if isinstance(key, str):
                present[key] = str(message.get("id"))
        found = [o for o in batch if o.key in present]
        if found:
            self._state.record_synced(
                ((o.key, workspace, session, present[o.key]) for o in found), now_rfc3339()
            )
            report.found_in_honcho += len(found)
        return [o for o in batch if o.key not in present]
