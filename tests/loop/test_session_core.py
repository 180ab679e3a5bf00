"""The session's sans-I/O core, driven by events alone: no disk, no model server, no memoryd.

First the table, with event types alone (as the turn's, test_turn_core.py); then each way a
turn goes through its session, as the actions the core asks for: new and resumed sessions, a
resent turn, compaction (the summary's room, every smaller request the slot refuses, a failed
and an empty summary), a closed epoch found on reading, and the turn. Then two properties: an
epoch the core closed opens with the same summary whether straight on or read back from its
log after a crash; and the summary is asked for with each smaller view in turn, never one more.
The shell's I/O is judged through Sessions.run in test_epochs.py, test_origin.py and the rest.
"""

from __future__ import annotations

import pytest
from bxcore.chat import FunctionCall, ToolCall, UserMessage
from bxcore.protocol.loop import AnswerTaint, TurnDone, TurnUsage
from bxcore.records import Assistant, EpochEnd, SessionStart, Usage, User
from hypothesis import given
from hypothesis import strategies as st
from loopd.epochs import COMPACT_INSTRUCTION, EpochSettings
from loopd.errors import CorruptSession, IllegalTransition
from loopd.inference.api import Completion
from loopd.log import encode_record, parse_log
from loopd.replay import fitting_views
from loopd.session.core import SessionCore, SessionMachine, SessionState
from loopd.session.events import (
    Answer,
    AnswerAgain,
    CloseEpoch,
    CompactionDue,
    CountSummaryRoom,
    CreateSession,
    EpochClosed,
    EpochLog,
    EpochOpened,
    FoundClosed,
    LogRead,
    NewAsked,
    NothingFits,
    OpenEpoch,
    ReadSession,
    Ready,
    RefuseAgain,
    RequestSummary,
    Resent,
    ResumeAsked,
    RunTurn,
    SummaryFailed,
    SummaryRoom,
    SummaryTooLong,
    SummaryWritten,
    TurnFinished,
)

from .machine_table import brought_to, check_error_is_for_good, check_move

S = SessionState
ALL_MOVES = [NewAsked, ResumeAsked, LogRead, Resent, CompactionDue, FoundClosed, Ready,
             SummaryRoom, SummaryTooLong, NothingFits, SummaryFailed, SummaryWritten,
             EpochClosed, EpochOpened, TurnFinished]

LEGAL = {
    (S.IDLE, NewAsked): S.OPENING,
    (S.IDLE, ResumeAsked): S.OPENING,
    (S.OPENING, LogRead): S.OPEN,
    (S.OPEN, Resent): S.RESENT,
    (S.OPEN, CompactionDue): S.COUNTING,
    (S.OPEN, FoundClosed): S.STARTING_EPOCH,
    (S.OPEN, Ready): S.RUNNING,
    (S.COUNTING, SummaryRoom): S.SUMMARISING,
    (S.SUMMARISING, SummaryTooLong): S.SUMMARISING,
    (S.SUMMARISING, NothingFits): S.RUNNING,
    (S.SUMMARISING, SummaryFailed): S.RUNNING,
    (S.SUMMARISING, SummaryWritten): S.CLOSING,
    (S.CLOSING, EpochClosed): S.STARTING_EPOCH,
    (S.STARTING_EPOCH, EpochOpened): S.RUNNING,
    (S.RUNNING, TurnFinished): S.DONE,
}

# A shortest path of moves from IDLE to each state.
PATHS = {
    S.IDLE: [],
    S.OPENING: [ResumeAsked],
    S.OPEN: [ResumeAsked, LogRead],
    S.RESENT: [ResumeAsked, LogRead, Resent],
    S.COUNTING: [ResumeAsked, LogRead, CompactionDue],
    S.SUMMARISING: [ResumeAsked, LogRead, CompactionDue, SummaryRoom],
    S.CLOSING: [ResumeAsked, LogRead, CompactionDue, SummaryRoom, SummaryWritten],
    S.STARTING_EPOCH: [ResumeAsked, LogRead, FoundClosed],
    S.RUNNING: [ResumeAsked, LogRead, Ready],
    S.DONE: [ResumeAsked, LogRead, Ready, TurnFinished],
}


def machine_in(state: SessionState) -> SessionMachine:
    return brought_to(SessionMachine(), state, PATHS)


# --- the table, by event types alone -----------------------------------------------------

def test_every_state_but_error_has_a_path():
    assert set(PATHS) == set(SessionState) - {S.ERROR}


@pytest.mark.parametrize("state", list(PATHS))
@pytest.mark.parametrize("move", ALL_MOVES)
def test_every_state_and_move(state, move):
    check_move(machine_in(state), move, LEGAL.get((state, move)), S.ERROR)


def test_error_is_for_good():
    check_error_is_for_good(SessionMachine(), LogRead, ALL_MOVES)


# --- a turn's way through its session, as events and actions --------------------------------

T = "2026-09-18T12:00:00.000000Z"
SETTINGS = EpochSettings(compact_at_tokens=100, summary_tokens=99)
START = SessionStart(time=T, session="s1", epoch=0, slot=0, baseline="sha256:" + "0" * 64)
HEAD = (UserMessage(content="the system prompt"),)  # the baseline's opening, as the core sees it


def usage(held: int) -> Usage:
    return Usage(time=T, cache_n=0, prompt_n=held, predicted_n=0, reasoning_tokens=0,
                 thinking_capped=False)


def said(content: str | None, *calls: str) -> Assistant:
    return Assistant(time=T, content=content, reasoning_content=None,
                     tool_calls=[tool_call(i) for i in calls] or None)


def tool_call(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name="clock", arguments="{}"))


def exchange(asked: str, answer: str, held: int, origin: str | None = None) -> list:
    return [User(time=T, content=asked, origin=origin), said(answer), usage(held)]


def epoch_log(*records) -> EpochLog:
    """The log, and messages standing in for its replay (the core only cuts them)."""
    rest = tuple(UserMessage(content=getattr(r, "content", None) or r.type)
                 for r in records if isinstance(r, User | Assistant))
    return EpochLog(records=(START, *records), messages=HEAD + rest, opening=len(HEAD))


def completion(content: str | None, *calls: str) -> Completion:
    return Completion(content=content, reasoning_content=None,
                      tool_calls=tuple(tool_call(i) for i in calls) or None, cache_n=0,
                      prompt_n=5, predicted_n=5, reasoning_tokens=0, thinking_capped=False)


DONE = TurnDone(content="Two.", taint=AnswerTaint(highest="public", untrusted=False),
                usage=TurnUsage(cache_n=0, prompt_n=1, predicted_n=1, reasoning_tokens=0,
                                thinking_capped=False))
SMALL = epoch_log(*exchange("one", "One.", 20))
FULL = epoch_log(*exchange("one", "One.", 100))


def opened(log: EpochLog, origin: str | None = None, settings: EpochSettings = SETTINGS):
    core = SessionCore(settings)
    assert core.send(ResumeAsked(origin=origin)) == ReadSession()
    return core, core.send(LogRead(log=log))


def test_a_new_session_is_created_and_its_turn_run():
    core = SessionCore(SETTINGS)
    assert repr(core) == "<SessionCore IDLE>"
    assert core.send(NewAsked(origin="post:1")) == CreateSession()
    assert core.send(LogRead(log=epoch_log())) == RunTurn()
    assert core.send(TurnFinished(answer=DONE)) == Answer(answer=DONE)
    assert core.is_finished() and core.state is S.DONE


def test_a_resumed_session_below_the_limit_runs_its_turn_at_once():
    core, action = opened(SMALL)
    assert action == RunTurn() and core.state is S.RUNNING


def test_a_resent_turn_is_answered_again_from_the_log_before_any_compaction():
    """Its origin is found first: compacting would move the earlier turn out of the epoch."""
    log = epoch_log(*exchange("one", "One.", 100, origin="post:1"))
    core, action = opened(log, origin="post:1")
    assert action == AnswerAgain(answer=TurnDone(content="One.", usage=TurnUsage(
        cache_n=0, prompt_n=100, predicted_n=0, reasoning_tokens=0, thinking_capped=False)),
        line=2)
    assert core.state is S.RESENT and core.is_finished()


def test_a_resent_turn_that_ended_without_an_answer_is_refused():
    log = epoch_log(User(time=T, content="one", origin="post:1"), said(None, "c1"), usage(5))
    core, action = opened(log, origin="post:1")
    assert action == RefuseAgain(line=2) and core.is_finished()


def test_another_origin_or_none_runs_the_turn():
    log = epoch_log(*exchange("one", "One.", 5, origin="post:1"))
    assert opened(log, origin="post:2")[1] == RunTurn()
    assert opened(log)[1] == RunTurn()


def test_a_full_slot_is_compacted_with_the_whole_epoch_then_the_next_epoch_opens():
    core, action = opened(FULL)
    assert action == CountSummaryRoom() and core.state is S.COUNTING
    request = core.send(SummaryRoom(cap=None))
    assert request == RequestSummary(
        messages=(*FULL.messages, UserMessage(content=COMPACT_INSTRUCTION)), max_tokens=99)
    summary = completion("We said one.")
    assert core.send(SummaryWritten(completion=summary)) == CloseEpoch(summary=summary,
                                                                       notice=None)
    closed = epoch_log(*exchange("one", "One.", 100), User(time=T, content=COMPACT_INSTRUCTION),
                       said("We said one."), usage(110), EpochEnd(time=T, next_epoch=1))
    assert core.send(EpochClosed(log=closed)) == OpenEpoch(summary="We said one.")
    assert core.send(EpochOpened()) == RunTurn()
    assert core.send(TurnFinished(answer=DONE)) == Answer(answer=DONE)


def test_the_summary_is_asked_for_with_at_most_its_counted_room():
    core, _ = opened(FULL)
    assert core.send(SummaryRoom(cap=17)).max_tokens == 17


def test_no_limit_never_compacts():
    assert opened(FULL, settings=EpochSettings())[1] == RunTurn()


def test_a_failed_summary_runs_the_turn_in_the_old_epoch_saying_why():
    core, _ = opened(FULL)
    core.send(SummaryRoom(cap=None))
    assert core.send(SummaryFailed(message="the server is loading")) == RunTurn(
        uncompacted="compaction failed: the server is loading")


@pytest.mark.parametrize(("content", "calls", "wrote"), [
    (None, (), "nothing"),
    ("  \n", (), "nothing"),
    ("\u200b\u2060\ufeff", (), "only invisible characters"),
    (None, ("c1",), "a tool call"),
])
def test_a_summary_that_shows_nothing_closes_the_epoch_with_a_notice(content, calls, wrote):
    core, _ = opened(FULL)
    core.send(SummaryRoom(cap=None))
    summary = completion(content, *calls)
    close = core.send(SummaryWritten(completion=summary))
    assert isinstance(close, CloseEpoch) and close.summary == summary
    assert close.notice is not None and f"The model wrote {wrote} " in close.notice
    assert "- one" in close.notice  # the owner's last message


def test_a_log_found_closed_opens_the_next_epoch_from_its_summary():
    """loopd stopped, or memoryd was unreachable, between closing and opening."""
    closed = epoch_log(User(time=T, content=COMPACT_INSTRUCTION), said("S."), usage(9),
                       EpochEnd(time=T, next_epoch=1))
    core, action = opened(closed)
    assert action == OpenEpoch(summary="S.") and core.state is S.STARTING_EPOCH
    notice = epoch_log(said(None), usage(9), EpochEnd(time=T, next_epoch=1, summary="N."))
    assert opened(notice)[1] == OpenEpoch(summary="N.")


def test_a_log_closed_without_a_summary_is_corrupt():
    with pytest.raises(CorruptSession, match="session s1 epoch 0: closed without a summary"):
        opened(epoch_log(said(" "), EpochEnd(time=T, next_epoch=1)))


def test_the_cores_own_moves_cannot_be_sent():
    for move in (Resent, CompactionDue, FoundClosed, Ready, NothingFits):
        core, _ = opened(SMALL)
        with pytest.raises(IllegalTransition, match="the core's own move"):
            core.send(move())
        assert core.state is S.ERROR


def test_an_event_that_answers_no_action_under_way_is_refused_for_good():
    core, _ = opened(FULL)  # asked to count the summary's room
    with pytest.raises(IllegalTransition, match="SummaryFailed is not allowed in state COUNTING"):
        core.send(SummaryFailed(message="x"))
    with pytest.raises(IllegalTransition):
        core.send(SummaryRoom(cap=None))


# --- properties --------------------------------------------------------------------------

texts = st.text(st.sampled_from("ab \n\u200b\ufeffé"), max_size=12)


def read_back(records) -> EpochLog:
    """The log as a restarted loopd reads it: every record through its line on disk."""
    data = b"".join(encode_record(r) for r in records)
    parsed = parse_log(data, "0.jsonl", session="s1", epoch=0)
    return EpochLog(records=tuple(parsed), messages=HEAD, opening=len(HEAD))


@given(turns=st.lists(st.tuples(texts, texts), min_size=1, max_size=4), summary=texts,
       call=st.booleans(), too_long=st.integers(0, 2))
def test_a_closed_epoch_opens_the_same_whether_straight_on_or_read_back_after_a_crash(
    turns, summary, call, too_long
):
    """The core closes the epoch with what it appends (the shell's appends, done here as
    sessions.py does them); a core that reads that log back after a crash opens the next
    epoch with the same summary as the one that closed it: the log alone carries it."""
    records = [r for asked, answer in turns for r in exchange(asked or "?", answer, 60)]
    log = epoch_log(*records, usage(100))  # the slot full
    core, _ = opened(log)
    core.send(SummaryRoom(cap=None))
    for _ in range(too_long):
        assert isinstance(core.send(SummaryTooLong()), RequestSummary)
    written = completion(summary, *(("c9",) if call else ()))
    close = core.send(SummaryWritten(completion=written))
    assert isinstance(close, CloseEpoch)
    appended = [User(time=T, content=COMPACT_INSTRUCTION),
                said(written.content, *(("c9",) if call else ())), usage(10),
                EpochEnd(time=T, next_epoch=1, summary=close.notice)]
    closed = EpochLog(records=(*log.records, *appended), messages=log.messages,
                      opening=log.opening)
    straight_on = core.send(EpochClosed(log=closed))
    assert isinstance(straight_on, OpenEpoch) and straight_on.summary.strip()
    assert opened(read_back(closed.records))[1] == straight_on


@given(turns=st.integers(0, 6), refused=st.integers(0, 20), cap=st.none() | st.integers(16, 99))
def test_the_summary_is_asked_with_each_smaller_view_in_turn_then_the_turn_runs(
    turns, refused, cap
):
    """Every request the slot refuses is followed by the next of ``fitting_views``, each
    ending with the instruction and capped alike; after the last the turn runs uncompacted."""
    records = [r for n in range(turns) for r in exchange("x" * 3000 * n, "y", 10)]
    log = epoch_log(*records, usage(100))
    views = list(fitting_views(log.messages, log.opening))
    core, _ = opened(log)
    asked = [core.send(SummaryRoom(cap=cap))]
    while len(asked) <= refused and isinstance(asked[-1], RequestSummary):
        asked.append(core.send(SummaryTooLong()))
    requests = [a for a in asked if isinstance(a, RequestSummary)]
    assert [list(r.messages[:-1]) for r in requests] == views[:len(requests)]
    assert all(r.messages[-1].content == COMPACT_INSTRUCTION for r in requests)
    assert {r.max_tokens for r in requests} == {99 if cap is None else cap}
    if refused >= len(views):
        assert asked[-1] == RunTurn(
            uncompacted="not even the baseline fits the slot for a summary")
        assert core.state is S.RUNNING
    else:
        assert len(requests) == refused + 1 and core.state is S.SUMMARISING
