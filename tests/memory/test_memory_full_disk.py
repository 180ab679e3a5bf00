"""memoryd on a full disk, against the real ``memoryd serve`` on a real tmpfs (attack 31f).

- **A recall writes nothing.** With memoryd's whole state directory on a tmpfs, any number of
  recalls (generated queries) leave every file under it as it was (size, mtime, inode) and the
  free bytes and inodes unchanged; filled to the last byte or the last inode, recall still
  answers ``ok`` and finds what it found with room. Before, each recall counted its hits in
  state.sqlite's write-ahead log (1,500 recalls grew it by 4 MiB, below the audit log's
  reserve; a session that only recalls moved the free space another session sees), and on a
  full disk that write failed and the recall was answered ``internal``.
- **A write whose journal entry landed is answered done, whatever the index can take.** With
  the index's directory on its own tmpfs filled to the last byte or inode (memory/ has room),
  every memory call of a generated sequence (notes, identity adds, replaces and removes,
  recalls) is answered as a daemon with room answers it, recalls ``ok``; once the index's disk
  has room again the next call catches the index up and recall answers exactly as there.
  Before, a write applied on disk was answered ``internal`` when its notes could not be
  indexed, so the model wrote it again.
- **memoryd restarts on a full disk** (attack 31i, M1). After a generated history of memory
  calls made with room, and a stop or a crash (SIGKILL: state.sqlite's write-ahead log and its
  -shm are left), the disk filled to the last byte or inode: ``memoryd serve`` becomes ready,
  its recalls (generated) answer exactly as a memoryd's started with room on a copy of the same
  files, and a write is answered ``failed`` saying the state disk is full; once room is made,
  without a restart, a note is written and recall finds it. Before, memoryd exited 1: SQLite
  could not make state.sqlite's -wal and -shm (docs/decisions/memoryd-full-disk-start.md).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from bxcore.protocol import memory as proto
from bxcore.tools import ToolResponse
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.disks import tmpfs

from .support import call_frame
from .test_memory_answers_flow import WORDS, words
from .test_memory_answers_flow import action as memory_call
from .test_recall_flow import ask, serving

FULL = ["bytes", "inodes"]
NO_RESERVE = "[broker]\naudit_reserve_bytes = 0\naudit_reserve_inodes = 0\n"
SETTINGS = settings(max_examples=by_profile(short=2, long=30), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def fill(disk: Path, what: str) -> None:
    """Take the last byte (one file written until ENOSPC) or the last inode (empty files)."""
    fillers = disk / "fillers"
    fillers.mkdir()
    if what == "inodes":
        for n in range(10**7):
            try:
                (fillers / f"f{n}").touch()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return
    with (fillers / "bytes").open("ab", buffering=0) as handle:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


def room(disk: Path) -> tuple[int, int]:
    stats = os.statvfs(disk)
    return stats.f_bavail, stats.f_favail


def files(home: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``home`` (sockets aside): its size, mtime and inode."""
    return {str(path.relative_to(home)): (path.stat().st_size, path.stat().st_mtime_ns,
                                          path.stat().st_ino)
            for path in sorted(home.rglob("*")) if path.is_file()}


def answer(sock: Path, tool: str, args: dict[str, Any]) -> tuple[str, Any]:
    """(status, content) of one call as brokerd sends it; a recall's hits without their times
    (a note's is the daemon's clock). An error frame (``internal``) fails the test."""
    frame = ask(sock, call_frame(tool, args))
    assert frame.kind == proto.TOOL_RESPONSE, frame
    response = frame.parse(ToolResponse)
    if tool == "recall" and response.status == "ok":
        hits = json.loads(response.content)["results"]
        return response.status, [{**hit, "time": None} for hit in hits]
    return response.status, response.content


@contextmanager
def daemon_on_disk(directory: Path, what: str, index_only: bool = False
                   ) -> Iterator[tuple[Path, Path, Path]]:
    """``memoryd serve`` with its home (or, ``index_only``, just ``home/index``) on a small
    tmpfs: (memory.sock, home, the disk)."""
    options = "size=8m,nr_inodes=2000" if what == "bytes" else "size=64m,nr_inodes=300"
    home = directory / "home"
    disk_at = home / "index" if index_only else directory / "disk"
    with tmpfs(disk_at, options) as disk:
        if not index_only:
            home = disk / "home"
        # No reserve: the disk is filled by another writer, past any reserve.
        with serving(directory, home, NO_RESERVE) as (sock, home):
            yield sock, home, disk


@pytest.mark.parametrize("what", FULL)
@SETTINGS
@given(notes=st.lists(words, min_size=1, max_size=6),
       queries=st.lists(st.tuples(words, st.integers(1, 8)), min_size=1, max_size=30))
def test_a_recall_writes_nothing_and_answers_on_a_full_disk(tmp_path_factory, what, notes,
                                                            queries):
    directory = tmp_path_factory.mktemp("recall")
    with daemon_on_disk(directory, what) as (sock, home, disk):
        for text in notes:
            assert answer(sock, "memory", {"action": "note", "text": text})[0] == "ok"

        def recall_all() -> list[tuple[str, Any]]:
            return [answer(sock, "recall", {"query": q, "k": k}) for q, k in queries]

        before, free = files(home), room(disk)
        with_room = recall_all()
        assert (files(home), room(disk)) == (before, free), "a recall wrote to the state disk"
        assert all(status == "ok" for status, _ in with_room)

        fill(disk, what)
        before, free = files(home), room(disk)
        assert recall_all() == with_room
        assert (files(home), room(disk)) == (before, free)


def free_disk(disk: Path) -> None:
    for path in (disk / "fillers").iterdir():
        path.unlink()


@pytest.mark.parametrize("what", FULL)
@SETTINGS
@given(calls=st.lists(memory_call, min_size=1, max_size=12), after=words)
def test_a_write_done_on_disk_is_answered_done_when_the_index_is_full(tmp_path_factory, what,
                                                                      calls, after):
    worlds = []
    for full in (False, True):
        directory = tmp_path_factory.mktemp("index")
        with daemon_on_disk(directory, what, index_only=True) as (sock, _home, disk):
            if full:
                fill(disk, what)
            during = [answer(sock, tool, args) for tool, args in calls]
            if full:
                free_disk(disk)
            # The index has room (again): the next call catches it up with the files.
            later = [answer(sock, "recall", {"query": q, "k": 20})
                     for q in (after, " ".join(WORDS))]
        # While the index was full, a recall answers from what was indexed: only its status.
        worlds.append(([status if tool == "recall" else (status, content)
                        for (tool, _), (status, content) in zip(calls, during, strict=True)],
                       later))
    assert worlds[1] == worlds[0]


@pytest.mark.parametrize("what", FULL)
@SETTINGS
@given(history=st.lists(memory_call, min_size=1, max_size=8), crash=st.booleans(),
       queries=st.lists(st.tuples(words, st.integers(1, 8)), min_size=1, max_size=8),
       later=words)
def test_memoryd_restarts_on_a_full_disk_and_recovers_when_room_returns(
        tmp_path_factory, what, history, crash, queries, later):
    directory = tmp_path_factory.mktemp("restart")
    options = "size=8m,nr_inodes=2000" if what == "bytes" else "size=64m,nr_inodes=300"
    with tmpfs(directory / "disk", options) as disk:
        home = disk / "home"
        stop = signal.SIGKILL if crash else signal.SIGTERM
        with serving(directory / "before", home, NO_RESERVE, stop=stop) as (sock, _):
            for tool, args in history:
                answer(sock, tool, args)
        # A crash leaves the write-ahead log of state.sqlite; a stop removes it.
        assert (home / "index" / "state.sqlite-wal").exists() == crash
        shutil.copytree(home, directory / "copy")
        fill(disk, what)

        def recall_all(sock: Path) -> list[tuple[str, Any]]:
            return [answer(sock, "recall", {"query": q, "k": k}) for q, k in queries]

        with serving(directory / "full", home, NO_RESERVE) as (sock, _):  # ready: READY=1
            on_full_disk = recall_all(sock)
            status, text = answer(sock, "memory", {"action": "note", "text": later})
            assert (status, "the state disk is full" in text) == ("failed", True), text
            free_disk(disk)
            status, text = answer(sock, "memory", {"action": "note", "text": later})
            assert status == "ok", text
            noted = re.fullmatch(r"Noted as note (\S+) in notes\.md\.", text)
            assert noted, text
            _, hits = answer(sock, "recall", {"query": later, "k": 20})
            assert f"note:{noted[1]}" in [hit["origin"] for hit in hits]
    with serving(directory / "room", directory / "copy", NO_RESERVE) as (sock, _):
        assert on_full_disk == recall_all(sock)
