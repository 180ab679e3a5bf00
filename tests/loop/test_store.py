"""The session store: create, append, resume, torn and corrupt logs refused, the baseline read
from its file (never from system.md), ids that cannot escape, the call counter restored."""

from __future__ import annotations

import json

import pytest
from bxcore.records import EpochEnd, SessionStart, ToolResult, User
from bxcore.util import sha256
from loopd.baseline import Baseline
from loopd.errors import CorruptSession, NoSuchSession, SessionExists, TornLog
from loopd.log import encode_record
from loopd.store import SessionStore

from .support import FIXED_TIME, new_session, sample_baseline


def tool_result(call: int) -> ToolResult:
    return ToolResult.model_validate(
        {"time": FIXED_TIME, "call": call, "tool_call_id": f"c{call}", "content": "x",
         "class": "public", "untrusted": False, "truncated": False}
    )


def test_create_writes_the_baseline_and_session_start(tmp_path):
    session = new_session(tmp_path, "abc", slot=1)
    directory = tmp_path / "sessions" / "abc"
    assert sorted(p.name for p in directory.iterdir()) == ["0.baseline.json", "0.jsonl"]
    data = (directory / "0.baseline.json").read_bytes()
    assert data == sample_baseline().to_json()
    (start,) = [json.loads(line) for line in (directory / "0.jsonl").read_text().splitlines()]
    assert start == {"type": "session_start", "time": FIXED_TIME, "session": "abc", "epoch": 0,
                     "slot": 1, "baseline": sha256(data)}
    assert session.slot == 1 and session.epoch == 0
    assert not [p for p in (tmp_path / "sessions").iterdir() if p.name.startswith(".")]


def test_files_are_readable_by_the_units_group_and_by_no_one_else(tmp_path):
    new_session(tmp_path, "abc")
    directory = tmp_path / "sessions" / "abc"
    assert directory.stat().st_mode & 0o777 == 0o750
    assert (directory / "0.jsonl").stat().st_mode & 0o777 == 0o640


def test_an_append_is_on_disk_when_it_returns(tmp_path):
    session = new_session(tmp_path)
    record = User(time=FIXED_TIME, content="hello")
    session.append(record)
    assert session.log_path.read_bytes().endswith(encode_record(record))
    assert session.records[-1] == record
    assert session.messages[-1].content == "hello"


def test_resume_reads_back_exactly_what_was_appended(tmp_path):
    session = new_session(tmp_path)
    session.append(User(time=FIXED_TIME, content="one"))
    session.append(tool_result(1))
    reopened = SessionStore(tmp_path).open("s1")
    assert reopened.records == session.records
    assert reopened.messages == session.messages
    assert reopened.baseline == session.baseline


def test_the_call_counter_resumes_after_the_highest_tool_result(tmp_path):
    session = new_session(tmp_path)
    assert session.take_call() == 1
    session.append(tool_result(1))
    session.append(tool_result(7))
    reopened = SessionStore(tmp_path).open("s1")
    assert reopened.take_call() == 8
    assert reopened.take_call() == 9


def test_the_call_counter_runs_across_epochs_and_is_restored_from_every_earlier_log(tmp_path):
    """The call counter (docs/design.md, "The tool port") rises across the session, restored as one
    more than the highest ToolResult.call in the log, whichever epoch holds it."""
    store = SessionStore(tmp_path)
    session = new_session(tmp_path)
    session.append(tool_result(session.take_call()))
    session.append(tool_result(session.take_call()))
    session.append(EpochEnd(time=FIXED_TIME, next_epoch=1))
    second = store.start_epoch(session, sample_baseline(), time=FIXED_TIME)
    second.append(EpochEnd(time=FIXED_TIME, next_epoch=2))  # an epoch that ran no tool call
    third = store.start_epoch(second, sample_baseline(), time=FIXED_TIME)
    assert third.take_call() == 3  # not 1: the new epoch goes on counting
    third.append(tool_result(3))
    reopened = store.open("s1")
    assert reopened.epoch == 2
    assert reopened.take_call() == 4
    third.log_path.write_bytes(third.log_path.read_bytes().splitlines(keepends=True)[0])
    assert store.open("s1").take_call() == 3  # epoch 0's calls count when epoch 2 has none


def test_a_torn_last_line_is_refused_naming_file_and_line(tmp_path):
    session = new_session(tmp_path)
    session.append(User(time=FIXED_TIME, content="one"))
    before = session.log_path.read_bytes()
    with session.log_path.open("ab") as log:
        log.write(b'{"type":"user","time":"2026-')
    with pytest.raises(TornLog) as caught:
        SessionStore(tmp_path).open("s1")
    assert str(session.log_path) in str(caught.value)
    assert "line 3" in str(caught.value)
    # Nothing was repaired.
    assert session.log_path.read_bytes() == before + b'{"type":"user","time":"2026-'


def test_a_complete_line_that_is_not_a_record_is_refused_with_its_line(tmp_path):
    session = new_session(tmp_path)
    with session.log_path.open("ab") as log:
        log.write(b'{"type":"user","time":"not a time","content":"x"}\n')
    session2 = SessionStore(tmp_path)
    with pytest.raises(CorruptSession, match=r"0\.jsonl: line 2: user\.time"):
        session2.open("s1")


def test_a_log_must_start_with_its_own_session_start(tmp_path):
    new_session(tmp_path, "abc")
    path = tmp_path / "sessions" / "abc" / "0.jsonl"
    start = SessionStart(time=FIXED_TIME, session="other", epoch=0, slot=0, baseline="sha256:x")
    path.write_bytes(encode_record(start))
    with pytest.raises(CorruptSession, match="line 1 starts session 'other'"):
        SessionStore(tmp_path).open("abc")
    path.write_bytes(encode_record(User(time=FIXED_TIME, content="hi")))
    with pytest.raises(CorruptSession, match="line 1 is user"):
        SessionStore(tmp_path).open("abc")
    path.write_bytes(b"")
    with pytest.raises(CorruptSession, match="empty"):
        SessionStore(tmp_path).open("abc")


def test_resume_takes_the_baseline_from_its_file_not_from_system_md(tmp_path):
    system = tmp_path / "system.md"
    system.write_text("First system prompt.\n")
    baseline = Baseline.assemble(system=system, identity="", tools=[])
    SessionStore(tmp_path).create("s1", baseline, slot=0, time=FIXED_TIME)
    system.write_text("An edited system prompt.\n")
    reopened = SessionStore(tmp_path).open("s1")
    assert reopened.baseline.system == "First system prompt."
    assert reopened.messages[0].content == "First system prompt."


def test_an_altered_baseline_file_is_refused(tmp_path):
    new_session(tmp_path)
    path = tmp_path / "sessions" / "s1" / "0.baseline.json"
    path.write_bytes(path.read_bytes().replace(b"test assistant", b"tost assistant"))
    with pytest.raises(CorruptSession, match=r"0\.baseline\.json: its sha256"):
        SessionStore(tmp_path).open("s1")


def test_create_refuses_an_existing_id_and_open_a_missing_one(tmp_path):
    new_session(tmp_path)
    with pytest.raises(SessionExists):
        new_session(tmp_path)
    with pytest.raises(NoSuchSession):
        SessionStore(tmp_path).open("nope")


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "", "-x", ".hidden", "x" * 65, "a\nb"])
def test_session_ids_cannot_escape_the_sessions_directory(tmp_path, bad):
    with pytest.raises(ValueError):
        SessionStore(tmp_path).open(bad)
    with pytest.raises(ValueError):
        SessionStore(tmp_path).create(bad, sample_baseline(), slot=0, time=FIXED_TIME)
    assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir())


def test_open_continues_in_the_highest_epoch(tmp_path):
    """Only epoch 0 is written today; the layout is ready for compaction's next epochs."""
    new_session(tmp_path)
    directory = tmp_path / "sessions" / "s1"
    baseline = Baseline(system="epoch one", tools=[])
    (directory / "1.baseline.json").write_bytes(baseline.to_json())
    start = SessionStart(time=FIXED_TIME, session="s1", epoch=1, slot=0, baseline=baseline.hash())
    (directory / "1.jsonl").write_bytes(encode_record(start))
    reopened = SessionStore(tmp_path).open("s1")
    assert reopened.epoch == 1
    assert reopened.log_path.name == "1.jsonl"
    assert reopened.messages[0].content == "epoch one"


def test_a_session_notices_a_log_changed_under_it(tmp_path):
    session = new_session(tmp_path)
    assert session.is_current()
    with session.log_path.open("ab") as log:
        log.write(encode_record(User(time=FIXED_TIME, content="written elsewhere")))
    assert not session.is_current()


def test_a_new_session_uses_its_baseline_as_a_resumed_one_will(tmp_path):
    """Key order included: the request after a restart must render exactly as before it."""
    session = new_session(tmp_path)
    reopened = SessionStore(tmp_path).open("s1")
    dumped = [json.dumps(t.model_dump(mode="json")) for t in session.baseline.tools]
    assert dumped == [json.dumps(t.model_dump(mode="json")) for t in reopened.baseline.tools]


def test_a_creation_cut_short_leaves_only_staging_which_the_next_start_removes(tmp_path):
    """A crash inside create() before its rename leaves a hidden staging directory: no session,
    never acknowledged. remove_staging (loopd serve calls it at start) deletes exactly those."""
    new_session(tmp_path, "kept")
    sessions = tmp_path / "sessions"
    cut_short = sessions / ".new-lost-0a1b2c3d"
    cut_short.mkdir()
    (cut_short / "0.jsonl").write_text("{}\n")
    store = SessionStore(tmp_path)
    assert store.remove_staging() == [".new-lost-0a1b2c3d"]
    assert sorted(p.name for p in sessions.iterdir()) == ["kept"]
    assert store.open("kept").epoch == 0
