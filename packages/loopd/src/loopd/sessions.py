"""The sessions loopd serves: one turn at a time each (docs/design.md, "The channel protocol").
``Sessions.run`` returns the turn's ``TurnDone`` or raises: a LoopError (a bxcore Refused) with
the wire code the channel is answered with, or any other exception, a failure answered
``internal``; sockets.py reads the channel's ``turn`` and bxcore.daemon.answering writes the
answer either way. A subagent's turn (subagents.py) comes here too, with no socket.

A registry of per-session locks refuses a second turn on a busy session (SessionBusy,
``session_busy``) at once; the lock is released before the answer or the error leaves ``run``,
so a channel that sends its next turn on reading the final frame is never refused.

Open sessions are kept (their records mirror the log) so a turn does not re-read its log. Before
a kept session is used its log's size is checked; a log that changed under it is read again.

Inside the lock, before the turn: a new session gets its epoch-0 baseline (identity from
memoryd); a session due for compaction is compacted (epochs.py), and a closed one gets its next
epoch. After the turn, whatever it ended with, the records it appended are reported to memoryd in
the background, so the final frame never waits for memoryd.

A turn whose ``origin`` the session's log already holds (a channel's resend, origins.py) is not
run again: it is answered, inside the lock and before any compaction, with the earlier turn's
``turn_done``, or refused (AlreadyTaken, ``bad_request``) if that turn ended without an answer.

A new session, and each new epoch, records the serving settings it begins under (``serving``,
read from the server; docs/design.md) beside its logs, so the self-test and ``bxctl
doctor`` can name what changed since. A server that cannot say leaves no record; the turn runs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from bxcore.config.inference import SlotSection
from bxcore.logs import fields
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn

from .epochs import (
    Baselines,
    BaselineSource,
    EpochSettings,
    close_epoch,
    needs_compaction,
    open_epoch,
)
from .errors import AlreadyTaken, SessionBusy, SessionExists
from .inference.api import EventSink
from .inference.errors import InferenceError
from .inference.serving import ServingSettings
from .memory import IdentityFiles, Memory
from .origins import Taken, taken
from .store import Session, SessionStore
from .turn import Loop, run_turn
from .turn.shell import answer_taint

log = logging.getLogger("loopd")

KEPT_SESSIONS = 64  # open sessions kept in memory; the least recently used is dropped


class Sessions:
    def __init__(
        self, *, store: SessionStore, loop: Loop, new_baseline: BaselineSource,
        slots: SlotSection, memory: Memory | None = None,
        epochs: EpochSettings | None = None, kept_sessions: int = KEPT_SESSIONS,
        serving: Callable[[], Awaitable[ServingSettings]] | None = None,
    ):
        self.store = store
        self.epochs = epochs or EpochSettings()
        # tool results capped to the slot's room above compaction (epochs.py)
        self.loop = dataclasses.replace(loop, settings=self.epochs.capped(loop.settings))
        self._new_baseline = new_baseline
        self._slots = slots
        self.memory = memory or IdentityFiles(())
        self._busy: set[str] = set()
        self._kept: OrderedDict[str, Session] = OrderedDict()
        self._kept_max = kept_sessions
        self._serving = serving

    async def run(self, turn: Turn, events: EventSink, *, rounds: int | None = None
                  ) -> wire.TurnDone:
        """One turn's answer (or its error, module docstring). The session's lock is held only
        inside. ``rounds`` lowers the turn's limit of tool rounds (a subagent's task may ask
        for fewer)."""
        if turn.session in self._busy:
            raise SessionBusy(f"session {turn.session} is running a turn")
        self._busy.add(turn.session)
        try:
            return await self._run_locked(turn, events, self._loop_with(rounds))
        finally:
            self._busy.discard(turn.session)

    def _loop_with(self, rounds: int | None) -> Loop:
        limit = self.loop.settings.tool_iterations
        if rounds is None or rounds >= limit:
            return self.loop
        return dataclasses.replace(
            self.loop, settings=dataclasses.replace(self.loop.settings, tool_iterations=rounds))

    async def _run_locked(self, turn: Turn, events: EventSink, loop: Loop) -> wire.TurnDone:
        try:
            session = await self._session_for(turn)
            earlier = taken(session.records, turn.origin) if turn.origin is not None else None
            if earlier is not None:  # before compaction could move its turn out of this epoch
                return _taken_answer(turn, earlier, answer_taint(session))
            session = await self._current_epoch(session, events)
            done = await self._turn(session, turn, events, loop)
        except (SessionBusy, SessionExists, AlreadyTaken):
            raise
        except Exception as exc:  # what was kept of the session may no longer be its files
            self._kept.pop(turn.session, None)
            exc.add_note(f"session {turn.session}")  # for the traceback a failure is logged with
            raise
        log.info("session %s: turn done in epoch %d: %d prompt tokens, %d of them from the "
                 "cache, %d generated", session.id, session.epoch, done.usage.prompt_n,
                 done.usage.cache_n, done.usage.predicted_n,
                 extra=fields(session=session.id, epoch=session.epoch))
        return done

    async def _turn(self, session: Session, turn: Turn, events: EventSink, loop: Loop
                    ) -> wire.TurnDone:
        """Run the turn; whatever it ends with, report what it appended to memoryd."""
        start = len(session.records)
        try:
            return await run_turn(
                loop, session, turn.content, events, turn.tool_choice, thinking=turn.thinking,
                origin=turn.origin,
            )
        finally:
            self._report(session, start)

    def _report(self, session: Session, start: int) -> None:
        records = session.records[start:]
        self.memory.turn_finished(session.id, session.epoch, start + 1, records)

    async def _current_epoch(self, session: Session, events: EventSink) -> Session:
        """The session in the epoch the turn runs in: compacted first if it is due, and moved
        on to its next epoch if it is closed. The lock is held: no turn of it runs meanwhile."""
        if needs_compaction(session, self.epochs):
            start = len(session.records)
            cap = await self._summary_cap(session)
            if await close_epoch(self.loop, session, events, self.epochs, summary_cap=cap):
                self._report(session, start)
        if session.closed:
            self._kept.pop(session.id, None)
            session = await open_epoch(
                self.store, session, self._new_baseline, time=self.loop.now()
            )
            log.info("session %s: epoch %d started", session.id, session.epoch,
                     extra=fields(session=session.id, epoch=session.epoch))
            await self._record_serving(session)
            self._keep(session)
        return session

    async def _summary_cap(self, session: Session) -> int | None:
        """What the summary may cost (``Baselines.summary_cap``); None (``summary_tokens``)
        from a baseline source that cannot count, or a server that cannot say now."""
        if not isinstance(self._new_baseline, Baselines):
            return None
        try:
            return await self._new_baseline.summary_cap(session.baseline,
                                                        self.epochs.summary_tokens)
        except InferenceError as exc:
            log.warning("session %s: the summary's room cannot be counted: %s", session.id, exc)
            return None

    async def _record_serving(self, session: Session) -> None:
        if self._serving is None:
            return
        try:
            self.store.record_serving(session, await self._serving())
        except InferenceError as exc:
            log.warning("session %s: the serving settings were not recorded: %s", session.id, exc,
                        extra=fields(session=session.id, epoch=session.epoch))

    async def _session_for(self, turn: Turn) -> Session:
        session: Session | None
        if not turn.resume:
            if self.store.exists(turn.session):
                raise SessionExists(f"session {turn.session} exists already")
            baseline = await self._new_baseline(turn.session, 0, None)
            session = self.store.create(
                turn.session, baseline, slot=self.slot_for(turn.session_kind),
                time=self.loop.now(),
            )
            await self._record_serving(session)
        else:
            kept = self._kept.get(turn.session)
            session = kept if kept is not None and kept.is_current() else None
            if session is None:
                session = self.store.open(turn.session)
        assert session is not None
        self._keep(session)
        return session

    def slot_for(self, kind: wire.SessionKind) -> int:
        """A session's kind picks its slot; the slot is then fixed in its session_start."""
        return self._slots.main if kind == "main" else self._slots.background

    def _keep(self, session: Session) -> None:
        self._kept[session.id] = session
        self._kept.move_to_end(session.id)
        while len(self._kept) > self._kept_max:
            self._kept.popitem(last=False)


def _taken_answer(turn: Turn, earlier: Taken, taint: wire.AnswerTaint) -> wire.TurnDone:
    """A resent turn is not run again: its earlier answer (with the session's taint now, never
    less than then), or AlreadyTaken saying it has none."""
    log.info("session %s: origin %s was taken at line %d; not run again",
             turn.session, turn.origin, earlier.line, extra=fields(session=turn.session))
    if earlier.answer is None:
        raise AlreadyTaken(
            f"session {turn.session}: the turn from {turn.origin} was already taken (log line "
            f"{earlier.line}) and ended without an answer; it is not run twice")
    return earlier.answer.model_copy(update={"taint": taint})
