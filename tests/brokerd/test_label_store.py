"""The mount labels' shell (brokerd.labelstore), the runner around it, and the owner's command:
raises on disk before the call's backend runs, replayed at start, a torn tail cut off; every
allowed call audited whatever the backend raises; ``brokerd labels lower`` audited, and refused
while brokerd runs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import hypothesis.strategies as st
import pytest
from brokerd.audit import entries
from brokerd.cli import main
from brokerd.errors import FlowRefused, LabelError
from brokerd.labels import PLAIN, Label, Reach, join_all
from brokerd.labelstore import LabelStore, held
from brokerd.policy import Decision
from brokerd.writeperiods import Period, WritePeriods, changed_while_writing
from brokerd_support import call_tool, make_rig, request, write
from bxcore.tools import DataClass, ToolResponse
from click.testing import CliRunner
from hypothesis import given, settings
from support.brokerd import start

SECRET = Label(DataClass.SECRET, False)
WRITES_WORK = Reach(frozenset({"/work", "/data"}), frozenset({"/work"}), SECRET)


def test_raises_are_on_disk_when_start_returns_and_replayed_at_start(tmp_path):
    store = LabelStore(tmp_path / "labels.jsonl")
    token = store.start(WRITES_WORK, session="s", call=1)
    assert LabelStore(tmp_path / "labels.jsonl").labels() == {"/work": SECRET}
    assert store.finish(token) == SECRET
    (line,) = (tmp_path / "labels.jsonl").read_text().splitlines()
    assert json.loads(line) == {"path": "/work", "class": "secret", "untrusted": False,
                                "lowered": False, "session": "s", "call": 1, "by": None}


def test_a_torn_last_line_is_skipped_then_cut_off_and_a_bad_middle_line_is_named(tmp_path):
    path = tmp_path / "labels.jsonl"
    store = LabelStore(path)
    store.finish(store.start(WRITES_WORK, session="s", call=1))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"path": "/other", "cla')  # a crash mid-append
    again = LabelStore(path)
    assert again.labels() == {"/work": SECRET}
    untrusted = Reach(frozenset({"/in"}), frozenset({"/in"}), Label(DataClass.PUBLIC, True))
    again.finish(again.start(untrusted, session="t", call=2))
    assert LabelStore(path).labels() == {"/work": SECRET, "/in": Label(DataClass.PUBLIC, True)}
    path.write_bytes(b'{"nope": 1}\n' + whole)
    with pytest.raises(LabelError, match=f"{path}:1: not a label line"):
        LabelStore(path)


def test_the_owner_lowers_only_what_is_labelled_only_downwards_and_only_while_nothing_runs(
        tmp_path):
    store = LabelStore(tmp_path / "labels.jsonl")
    token = store.start(WRITES_WORK, session="s", call=1)
    with pytest.raises(LabelError, match="while no call runs"):
        store.lower("/work", PLAIN, by="owner")
    store.finish(token)
    with pytest.raises(LabelError, match="/nowhere: no label"):
        store.lower("/nowhere", PLAIN, by="owner")
    assert store.lower("/work", Label(DataClass.PRIVATE), by="owner") == SECRET
    with pytest.raises(LabelError, match="not lower"):
        store.lower("/work", Label(DataClass.PRIVATE, True), by="owner")
    assert LabelStore(tmp_path / "labels.jsonl").labels() == {"/work": Label(DataClass.PRIVATE)}


def test_the_lock_has_one_holder(tmp_path):
    with held(tmp_path / "labels.lock"), pytest.raises(LabelError, match="running brokerd"), \
            held(tmp_path / "labels.lock"):
        pass


# --- the runner: every allowed call is audited, whatever breaks --------------------------------

FILES_GRANT = """
    tools = ["fs.write"]
    mode = "auto"
    classes = ["public", "private", "secret"]
    result_class = "private"
    [sandbox]
    mounts = [{{ path = "{work}", write = true }}]
"""
FAILURES = st.sampled_from([UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates"),
                            KeyError("x"), OSError(5, "EIO"), ValueError("bad"),
                            RuntimeError("boom"), AssertionError(), RecursionError(),
                            ZeroDivisionError(), TypeError("t"), MemoryError()])


class RaisingBackend:
    def __init__(self, failure: BaseException, labels_file: Path):
        self.failure = failure
        self.labels_file = labels_file
        self.seen_on_disk: list[dict[str, object]] = []

    async def run(self, decision: Decision):
        decision.authorize()
        self.seen_on_disk = [json.loads(x) for x in self.labels_file.read_text().splitlines()]
        raise self.failure


def rig_with(tmp_path: Path, backend):
    rig = make_rig(tmp_path)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    write(rig.grants, "files.toml", FILES_GRANT.format(work=work))
    rig.broker._runner._backend = backend
    return rig, work


def one_call(rig, tmp_path: Path, session: str, call: int) -> ToolResponse:
    async def body():
        servers = await start(rig.broker, tmp_path / "b.sock", tmp_path / "a.sock")
        try:
            frames = await call_tool(tmp_path / "b.sock", request(
                "fs.write", json.dumps({"path": "/w/x", "text": "x"}), call=call,
                session=session))
        finally:
            for server in servers:
                server.close()
        return frames[-1].parse(ToolResponse)

    return asyncio.run(body())


@settings(max_examples=10)
@given(failure=FAILURES, call=st.integers(1, 10**6))
def test_a_backend_that_raises_anything_still_gives_an_audited_failed_result(
        tmp_path_factory, failure, call):
    tmp_path = tmp_path_factory.mktemp("raising")
    home = tmp_path / "home"
    backend = RaisingBackend(failure, home / "broker" / "labels.jsonl")
    rig, work = rig_with(tmp_path, backend)
    answer = one_call(rig, tmp_path, "s1", call)
    assert answer.status == "failed" and "bug in brokerd" in answer.content
    assert type(failure).__name__ in answer.content
    # the raise was durable before the backend ran: the session's class was the grant's
    assert backend.seen_on_disk == [{"path": str(work), "class": "private", "untrusted": False,
                                     "lowered": False, "session": "s1", "call": call,
                                     "by": None}]
    results = [e for e in entries(rig.audit_dir) if e.kind == "result"]
    assert [(r.call, r.status) for r in results] == [(call, "failed")]
    assert (rig.taint_dir / "s1.json").exists()


def test_a_call_whose_raises_cannot_be_written_does_not_run_and_is_audited(tmp_path):
    rig, _work = rig_with(tmp_path, RaisingBackend(RuntimeError("ran"), tmp_path / "none"))
    (rig.home / "broker" / "labels.jsonl").mkdir(parents=True)  # cannot be appended to
    answer = one_call(rig, tmp_path, "s1", 1)
    assert answer.status == "failed" and "cannot write its mount labels" in answer.content
    assert str(rig.home) not in answer.content  # brokerd's paths stay in its log
    # the raise it needed tells what the call would have read: the answer is labelled with it
    assert answer.data_class == "private", answer
    assert [e.status for e in entries(rig.audit_dir) if e.kind == "result"] == ["failed"]


# --- the owner's command -----------------------------------------------------------------------


def test_labels_show_and_an_audited_lower(tmp_path):
    config = write(tmp_path, "config.toml", f"""
        [paths]
        home = "{tmp_path / 'home'}"
        run = "{tmp_path / 'run'}"
        [broker]
        grants = "{tmp_path / 'grants'}"
    """)
    store = LabelStore(tmp_path / "home" / "broker" / "labels.jsonl")
    store.finish(store.start(WRITES_WORK, session="s", call=1))
    cli = CliRunner()
    shown = cli.invoke(main, ["labels", "show", "--config", str(config), "--json"])
    assert json.loads(shown.output) == {"/work": {"class": "secret", "untrusted": False}}
    with held(tmp_path / "home" / "broker" / "labels.lock"):  # brokerd serve holds it
        busy = cli.invoke(main, ["labels", "lower", "/work", "--class", "public", "--trusted",
                                 "--config", str(config)])
    assert busy.exit_code == 1 and "stop it first" in busy.output
    lowered = cli.invoke(main, ["labels", "lower", "/work", "--class", "public", "--trusted",
                                "--config", str(config)])
    assert lowered.exit_code == 0, lowered.output
    (record,) = entries(tmp_path / "home" / "audit")
    assert (record.kind, record.path, record.was_class, record.data_class) == \
        ("label", "/work", DataClass.SECRET, DataClass.PUBLIC)
    assert cli.invoke(main, ["audit", "verify", "--config", str(config)]).exit_code == 0
    assert LabelStore(tmp_path / "home" / "broker" / "labels.jsonl").labels() == \
        {"/work": PLAIN}


READS_ONLY = Reach(frozenset({"/data"}), frozenset(), SECRET)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=12))
def test_the_write_periods_cover_every_moment_a_call_that_writes_runs(tmp_path_factory, steps):
    """Calls that write and calls that only read start and end in any order (each step starts
    one, or ends the oldest running): every moment a writing call runs lies in a recorded
    period, the file parses back to what was written, and no period opens for reads alone."""
    home = tmp_path_factory.mktemp("periods")
    periods = WritePeriods(home / "write-periods")
    store = LabelStore(home / "labels.jsonl", periods)
    running: list[tuple[int, bool]] = []
    moments: list[int] = []
    for call, (begins, writes) in enumerate(steps):
        if begins or not running:
            running.append((store.start(WRITES_WORK if writes else READS_ONLY,
                                        session="s", call=call), writes))
        else:
            store.finish(running.pop(0)[0])
        if any(w for _, w in running):
            moments.append(time.time_ns())
    recorded = periods.read()
    assert all(changed_while_writing(m, recorded) for m in moments)
    assert bool(recorded) == bool(moments)
    for token, _ in running:
        store.finish(token)
    assert all(p.end is not None for p in periods.read())


def test_a_period_a_killed_brokerd_left_open_ends_at_the_next_start_and_a_torn_edge_is_cut(
        tmp_path):
    path = tmp_path / "write-periods"
    store = LabelStore(tmp_path / "labels.jsonl", WritePeriods(path))
    store.start(WRITES_WORK, session="s", call=1)  # and brokerd is killed
    (begun,) = WritePeriods(path).read()
    assert begun.end is None and changed_while_writing(time.time_ns() + 10**12, (begun,))
    path.write_bytes(path.read_bytes() + b"end 12")  # torn mid-append
    WritePeriods(path).close_unfinished()
    (ended,) = WritePeriods(path).read()
    assert ended.begin == begun.begin and ended.end is not None
    path.write_bytes(b"begin 1\nbegin 2\n")
    with pytest.raises(LabelError, match=f"{path}:2: 'begin' where the last period is open"):
        WritePeriods(path).read()


@settings(max_examples=40)
@given(st.integers(1, 5), st.lists(st.sampled_from([SECRET, PLAIN, Label(DataClass.PUBLIC,
                                                                          True)]), max_size=8))
def test_no_more_calls_run_than_the_cap_and_a_refusal_carries_what_reached_the_running(
        tmp_path_factory, cap, sessions):
    """Each session's call starts while the earlier ones run: the first ``cap`` run, every
    later one is refused, labelled with what reached the running calls (whether it ran tells
    of them)."""
    store = LabelStore(tmp_path_factory.mktemp("cap") / "labels.jsonl", max_running=cap)
    tokens = []
    for call, taint in enumerate(sessions):
        reach = Reach(frozenset({f"/r{call}"}), frozenset(), taint)
        if len(tokens) < cap:
            tokens.append(store.start(reach, session=f"s{call}", call=call))
            continue
        with pytest.raises(FlowRefused, match="max_running_calls") as refused:
            store.start(reach, session=f"s{call}", call=call)
        assert refused.value.consulted.covers(join_all(sessions[:cap]))
    for token in tokens:
        store.finish(token)
    store.finish(store.start(WRITES_WORK, session="after", call=99))


@settings(max_examples=60)
@given(st.integers(0, 10**9 * 10**9), st.integers(0, 5 * 10**9))
def test_a_write_early_in_a_period_counts_on_a_filesystem_that_keeps_whole_seconds(
        begin, after):
    """A write ``after`` ns into a period, its ctime cut down to the whole second (ext4 with
    small inodes, NFS) or to two (FAT): inside the period (attack 31l, F6)."""
    written = begin + after
    for step in (10**9, 2 * 10**9):
        assert changed_while_writing(written - written % step, (Period(begin, None),))


@settings(max_examples=40)
@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_an_owners_save_just_before_a_period_is_outside_it_and_a_write_just_after_inside(
        tmp_path_factory, files_per_period):
    """Judged by the kernel's own ctimes: a file the owner saves right before a call that writes
    begins is not taken for a tool's, and one written right after the begin is (before: the
    begin, read from the coarse clock, took in saves up to a tick before it)."""
    home = tmp_path_factory.mktemp("edges")
    periods = WritePeriods(home / "write-periods")
    for n, new_file in enumerate(files_per_period):
        before, after = home / f"owner{n}.toml", home / f"tool{n}.txt"
        if not new_file:  # an existing file saved again, and one the tool changes
            before.write_text("earlier")
            after.write_text("earlier")
        before.write_text("the owner's")
        periods.opened()
        after.write_text("a tool's")
        periods.closed()
        recorded = periods.read()
        assert changed_while_writing(before.stat().st_ctime_ns, recorded) is None, n
        assert changed_while_writing(after.stat().st_ctime_ns, recorded) is not None, n
