"""Recall answers a session from what is at or below its taint, and from nothing else
(docs/decisions/recall-per-label.md; attack 31e, M1).

The property: two worlds that differ only in documents above what the asking session searches
(its taint, or more when it asks with ``reach`` and ``untrusted``; the answer is then labelled
with all it searched) (their
texts, how many, their classes and trust; in sessions of their own, or appended to a session
after the point where it rose above the asker) give that session the same recall answer for
every query and k: the same hits in the same order with the same scores, the same emptiness,
the same label. Through memoryd's own request handling (``MemoryService.memory_call``) and its real
FTS5 index, and at the index itself for the scores, which the tool's answer does not carry;
then (a few examples) against ``memoryd serve`` over its socket, before and after a reindex.

Notes above the asker are written after every note at or below it here; that their order does
not matter either (note ids are numbered per label) is tests/memory/test_memory_answers_flow.py's
property (docs/decisions/memory-ids-per-label.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import memory as proto
from bxcore.tools import DataClass, ToolResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memoryd.taint import SessionTaint
from memoryd.wiring import build
from support.scratch import scratch_dir

from .support import (
    T,
    answer,
    append_log,
    call,
    call_frame,
    calling,
    config,
    result,
    turn,
    user,
    write_taint,
)

CLASSES = [DataClass.PUBLIC, DataClass.PRIVATE, DataClass.SECRET]
LABELS = [(c, u) for c in CLASSES for u in (False, True)]
WORDS = ["zebra", "yak", "heron", "kiwi", "mango", "tulip", "plan", "the"]

words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
# A record of a log: a user message, an answer, or a tool call and its result of some label.
record = st.one_of(
    st.tuples(st.just("user"), words), st.tuples(st.just("answer"), words),
    st.tuples(st.just("result"), words, st.sampled_from(LABELS)),
)
turns = st.lists(st.lists(record, min_size=1, max_size=4), min_size=1, max_size=3)


def at_or_below(label: tuple[DataClass, bool], taint: tuple[DataClass, bool]) -> bool:
    return label[0] <= taint[0] and label[1] <= taint[1]


def records_of(items: list[Any]) -> list[Any]:
    out = []
    for item in items:
        if item[0] == "user":
            out.append(user(item[1]))
        elif item[0] == "answer":
            out.append(answer(item[1]))
        else:
            (data_class, untrusted) = item[2]
            out += [calling(), result(item[1], data_class.value, untrusted)]
    return out


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    taint = draw(st.sampled_from(LABELS))
    # What it asks to search beyond its taint (recall's reach and untrusted), if anything.
    reach = draw(st.none() | st.sampled_from(CLASSES))
    wider = draw(st.booleans())
    asker = (max(taint[0], reach or DataClass.PUBLIC), taint[1] or wider)  # what is searched
    low = [label for label in LABELS if at_or_below(label, asker)]
    high = [label for label in LABELS if not at_or_below(label, asker)]

    def lowered(session_turns: list[list[Any]]) -> list[list[Any]]:
        # A base session reads nothing above the asker: its results are relabelled into range.
        return [[(*item[:2], draw(st.sampled_from(low))) if item[0] == "result" else item
                 for item in one] for one in session_turns]

    base = {f"b{i}": lowered(draw(turns)) for i in range(draw(st.integers(0, 4)))}
    base_notes = [(draw(words), draw(st.sampled_from(low)))
                  for _ in range(draw(st.integers(0, 3)))]
    extra: dict[str, Any] = {}
    tails: dict[str, Any] = {}
    extra_notes: list[Any] = []
    if high:
        # A session of its own that is above the asker from its first record on: by a result
        # above it, or by brokerd's taint file alone.
        for i in range(draw(st.integers(0, 4))):
            first = ("result", draw(words), draw(st.sampled_from(high)))
            by_file = draw(st.booleans())
            extra[f"x{i}"] = (draw(turns), first[2] if by_file else None,
                              [] if by_file else [first])
        # A base session that rises above the asker after its last base turn.
        for session in base:
            if draw(st.booleans()):
                head = ("result", draw(words), draw(st.sampled_from(high)))
                tails[session] = [[head, *one] for one in draw(turns)]
        extra_notes = [(draw(words), draw(st.sampled_from(high)))
                       for _ in range(draw(st.integers(0, 3)))]
    order = draw(st.permutations([*base, *extra]))
    queries = draw(st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)
                                      .map(" ".join), st.integers(1, 12)),
                            min_size=1, max_size=4))
    return dict(asker=asker, taint=taint, reach=reach, wider=wider, base=base,
                base_notes=base_notes, extra=extra, tails=tails, extra_notes=extra_notes,
                order=order, queries=queries)


def fixed_clock() -> str:
    return T


def service_at(home: Path, extra: str = "") -> Any:
    """memoryd's service, its note times fixed (the worlds are built at different moments)."""
    service = build(config(home, extra))
    service.writer._clock = fixed_clock
    return service


async def build_world(home: Path, world: dict[str, Any], with_extra: bool) -> Any:
    service = service_at(home, '[memory]\nceiling = "secret"\n')
    for session in world["order"]:
        if session in world["base"]:
            for one in world["base"][session]:
                await turn(service, home, session, records_of(one))
            for one in world["tails"].get(session, []) if with_extra else []:
                await turn(service, home, session, records_of(one))
        elif with_extra:
            session_turns, file_label, first = world["extra"][session]
            if file_label is not None:
                write_taint(home, session, [file_label[0].value], file_label[1])
            for n, one in enumerate(session_turns):
                await turn(service, home, session, records_of((first if n == 0 else []) + one))
    notes = world["base_notes"] + (world["extra_notes"] if with_extra else [])
    for n, (text, (data_class, untrusted)) in enumerate(notes):
        written = await call(service, "memory", {"action": "note", "text": text},
                             session=f"n{n}", data_class=data_class.value, untrusted=untrusted)
        assert written.status == "ok", written
    return service


async def answers(service: Any, world: dict[str, Any]) -> list[Any]:
    data_class, untrusted = world["taint"]
    taint = SessionTaint(*world["asker"])
    asks = ({"reach": world["reach"].value} if world["reach"] else {}) | (
        {"untrusted": True} if world["wider"] else {})
    out = []
    for query, k in world["queries"]:
        response = await call(service, "recall", {"query": query, "k": k, **asks},
                              session="asker", data_class=data_class.value, untrusted=untrusted)
        rows = service.index.search(query, k, taint)
        out.append((response, [(r.origin, r.score, r.data_class, r.untrusted) for r in rows]))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_what_is_above_the_asker_never_changes_its_recall(world):
    async def both(one: Path, other: Path) -> tuple[list[Any], list[Any]]:
        results = []
        for home, with_extra in ((one / "home", False), (other / "home", True)):
            service = await build_world(home, world, with_extra)
            try:
                results.append(await answers(service, world))
            finally:
                await service.aclose()
        return results[0], results[1]

    # in memory (tests/support/scratch.py): the stores' fsyncs were most of an example
    with scratch_dir() as one, scratch_dir() as other:
        alone, beside_higher = asyncio.run(both(one, other))
    assert beside_higher == alone
    for response, _ in alone:  # labelled with all it searched: the taint, or its reach
        assert (response.data_class, response.untrusted) == world["asker"], response


def test_attack_31e_m1_two_public_notes_beside_private_ones(tmp_path):
    """The attack's own case: which public note ranks first must not depend on private text."""
    firsts = []
    for bit in (0, 1):
        home = tmp_path / str(bit) / "home"

        async def one(home: Path = home, bit: int = bit) -> Any:
            service = service_at(home)
            try:
                for text in ("zebra zebra zebra", "yak yak yak"):
                    await call(service, "memory", {"action": "note", "text": text})
                word = "zebra" if bit else "okapi"
                for i in range(6):
                    await turn(service, home, f"priv{i}", [
                        calling(), result("private", "private"),
                        answer(f"the private plan mentions {word} in a long sentence {i}")])
                return await call(service, "recall", {"query": "zebra yak", "k": 1})
            finally:
                await service.aclose()

        firsts.append(asyncio.run(one()))
    assert firsts[0] == firsts[1]
    assert firsts[0].data_class == DataClass.PUBLIC


# -- the same property against the real daemon ------------------------------------------------


@contextlib.contextmanager
def serving(directory: Path, home: Path | None = None, extra: str = "",
            stop: signal.Signals = signal.SIGTERM) -> Iterator[tuple[Path, Path]]:
    """``memoryd serve`` over a fresh home (ceiling secret; ``directory``/home unless given;
    ``extra``: more config; ``stop``: the signal that ends it, SIGKILL for a crash):
    (memory.sock, home)."""
    home, run_dir = home or directory / "home", directory / "run"
    run_dir.mkdir(parents=True)
    (directory / "config.toml").write_text(
        f'[paths]\nhome = "{home}"\nrun = "{run_dir}"\n[memory]\nceiling = "secret"\n{extra}')
    notify_path = directory / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        notify.settimeout(60)
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--config", str(directory / "config.toml")],
            env={**os.environ, "NOTIFY_SOCKET": str(notify_path)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert notify.recv(256) == b"READY=1"
            yield run_dir / "memory.sock", home
        finally:
            process.send_signal(stop)
            process.wait(timeout=60)


def ask(path: Path, frame: Frame) -> Frame:
    with SyncFrameSocket.connect(path, kinds=proto.FROM_MEMORYD) as sock:
        sock.write(frame)
        return sock.read(timeout=60)


def feed(path: Path, home: Path, world: dict[str, Any], with_extra: bool) -> None:
    """The world through memory.sock, as loopd (turns) and brokerd (notes) send it."""
    def send_turn(session: str, items: list[Any]) -> None:
        records = records_of(items)
        first = append_log(home, session, 0, records)
        body = proto.TurnFinished(session=session, epoch=0, first_line=first, records=records)
        assert ask(path, Frame.of(proto.TURN_FINISHED, body, final=False)).kind == \
            proto.TURN_RECORDED

    for session in world["order"]:
        if session in world["base"]:
            for one in world["base"][session]:
                send_turn(session, one)
            for one in world["tails"].get(session, []) if with_extra else []:
                send_turn(session, one)
        elif with_extra:
            session_turns, file_label, first = world["extra"][session]
            if file_label is not None:
                write_taint(home, session, [file_label[0].value], file_label[1])
            for n, one in enumerate(session_turns):
                send_turn(session, (first if n == 0 else []) + one)
    notes = world["base_notes"] + (world["extra_notes"] if with_extra else [])
    for n, (text, (data_class, untrusted)) in enumerate(notes):
        frame = call_frame("memory", {"action": "note", "text": text}, session=f"n{n}",
                           data_class=data_class.value, untrusted=untrusted)
        assert ask(path, frame).parse(ToolResponse).status == "ok"


def asked(path: Path, world: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The asker's recall answers; a note's time (the daemon's clock when it was written) is
    the one thing the two worlds cannot share, so it is left out."""
    data_class, untrusted = world["asker"]
    out = []
    for query, k in world["queries"]:
        frame = call_frame("recall", {"query": query, "k": k}, session="asker",
                           data_class=data_class.value, untrusted=untrusted)
        response = ask(path, frame).parse(ToolResponse)
        hits = [{**hit, "time": None if hit["origin"].startswith("note:") else hit["time"]}
                for hit in json.loads(response.content)["results"]]
        out.append((response.status, response.data_class, response.untrusted, hits))
    return out


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_the_serving_daemon_answers_alike_before_and_after_a_reindex(tmp_path_factory, world):
    results = []
    for with_extra in (False, True):
        directory = tmp_path_factory.mktemp("daemon")
        with serving(directory) as (path, home):
            feed(path, home, world, with_extra)
            live = asked(path, world)
            reindexed = subprocess.run(
                [sys.executable, "-m", "memoryd", "reindex", "--config",
                 str(directory / "config.toml")],
                capture_output=True, text=True, timeout=120, check=False)
            assert reindexed.returncode == 0, reindexed.stderr
            results.append((live, asked(path, world)))
    (alone, alone_rebuilt), (beside_higher, beside_higher_rebuilt) = results
    assert beside_higher == alone
    assert beside_higher_rebuilt == alone_rebuilt == alone
