"""What one Honcho sync pass costs with a long history: memory_bench.py's sync figure.

Writes ``SESSIONS`` session logs of ``TURNS`` finished turns each (and a clean taint file for
each, as brokerd leaves after a tool call), records every turn in the ledger as written, and
times ``HonchoSync.sync_once`` against an in-process Honcho (an httpx MockTransport that answers
what memoryd sends). Bytes are the process's read() bytes (``rchar`` in /proc/self/io), so the
taint files, notes.md and SQLite count too. Three kinds of pass:

- a pass that reads every session: before the read cache, every pass; now the first after a start;
- a pass with nothing new (the sync's timer with no turn since);
- a pass after one turn finished in one session (what follows each turn), which writes it.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from bxcore.canonical import canonical_json
from bxcore.config.memory import HonchoSection
from bxcore.records import Assistant, User
from bxcore.tools import DataClass
from memoryd.honcho import HonchoSync, SyncReport
from memoryd.honcho.client import HonchoClient
from memoryd.index import StateDb
from memoryd.layout import Layout
from memoryd.taint import read_taint_file

TIME = "2026-11-30T07:00:00.000000Z"
URL = "http://honcho.bench"


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar")


def _turn(text: Callable[[], str]) -> bytes:
    records = [User(time=TIME, content=text()),
               Assistant(time=TIME, content=text(), reasoning_content=None, tool_calls=None)]
    return b"".join(canonical_json(r) + b"\n" for r in records)


def write_history(home: Path, sessions: int, turns: int, words: list[str],
                  rng: random.Random) -> StateDb:
    """The logs, the taint files, and a ledger that says every turn is in Honcho already."""
    layout = Layout(home)
    layout.ensure()
    layout.taint_files.mkdir(parents=True)
    state = StateDb(layout.state_db)
    text = lambda: " ".join(rng.choices(words, k=rng.randint(8, 40)))  # noqa: E731
    for n in range(sessions):
        session = f"bench-{n:05d}"
        (layout.sessions / session).mkdir(parents=True)
        (layout.sessions / session / "0.jsonl").write_bytes(
            b"".join(_turn(text) for _ in range(turns)))
        (layout.taint_files / f"{session}.json").write_bytes(canonical_json(
            {"session": session, "classes": ["public"], "untrusted": False}) + b"\n")
        state.record_synced(((f"{session}/0#{line}", "bx", session, f"{session}-{line}")
                             for line in range(1, 2 * turns + 1)), TIME)
    return state


def _honcho(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/messages"):
        sent = json.loads(request.content)["messages"]
        return httpx.Response(201, json=[{"id": f"m{i}", "metadata": m["metadata"]}
                                         for i, m in enumerate(sent)])
    return httpx.Response(200, json={})


async def _passes(home: Path, state: StateDb, words: list[str], rng: random.Random,
                  repeats: int) -> dict[str, list[tuple[float, int, SyncReport]]]:
    layout = Layout(home)
    section = HonchoSection.model_validate({"url": URL, "workspace": "bx"})
    client = HonchoClient(URL, transport=httpx.MockTransport(_honcho))

    def fresh() -> HonchoSync:  # what memoryd builds at start: an empty read cache
        return HonchoSync(layout, state, client, section, DataClass.PRIVATE,
                          lambda s: read_taint_file(layout.taint_files, s))

    async def timed(sync: HonchoSync) -> tuple[float, int, SyncReport]:
        before, started = rchar(), time.perf_counter()
        report = await sync.sync_once()
        return time.perf_counter() - started, rchar() - before, report

    out: dict[str, list[tuple[float, int, SyncReport]]] = {"all": [], "none": [], "one": []}
    for _ in range(3):
        out["all"].append(await timed(fresh()))
    sync = fresh()
    await sync.sync_once()
    sessions = sorted(p for p in layout.sessions.iterdir())
    text = lambda: " ".join(rng.choices(words, k=rng.randint(8, 40)))  # noqa: E731
    for n in range(repeats):
        out["none"].append(await timed(sync))
        with (sessions[n % len(sessions)] / "0.jsonl").open("ab") as log:
            log.write(_turn(text))
        out["one"].append(await timed(sync))
    await client.aclose()
    return out


def measure_sync(home: Path, sessions: int, turns: int, words: list[str], repeats: int = 20,
                 seed: int = 11) -> dict[str, Any]:
    rng = random.Random(seed)
    state = write_history(home, sessions, turns, words, rng)
    log_bytes = sum(p.stat().st_size for p in (home / "sessions").glob("*/*.jsonl"))
    try:
        runs = asyncio.run(_passes(home, state, words, rng, repeats))
    finally:
        state.close()
    rows = {}
    for kind, results in runs.items():
        rows[kind] = {"seconds": statistics.median(r[0] for r in results),
                      "bytes": statistics.median(r[1] for r in results),
                      "read": max(r[2].read for r in results),
                      "written": max(r[2].written for r in results)}
    return {"sessions": sessions, "turns": turns, "log_bytes": log_bytes, "repeats": repeats,
            "rows": rows}


LABELS = {
    "all": "reads every session (before the read cache: every pass; now the first after a start)",
    "none": "nothing new since the last pass",
    "one": "one session got a turn (the pass after each turn), which it writes",
}


def size(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def sync_table(result: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {LABELS[kind]} | {r['read']:,} | {r['written']} | {size(r['bytes'])} | "
        f"{r['seconds'] * 1000:,.1f} ms |" for kind, r in result["rows"].items()
    )
    before, after = result["rows"]["all"], result["rows"]["one"]
    return (
        f"{result['sessions']:,} sessions x {result['turns']} finished turns "
        f"({result['log_bytes'] / 1e6:,.1f} MB of logs), every turn already in the ledger, a "
        f"clean taint file per session; medians of 3 cold passes and of {result['repeats']} "
        "of each other kind. Sources read counts notes.md too.\n\n"
        "| Pass | Sources read | Messages written | read() bytes | Time |\n"
        "|---|---|---|---|---|\n"
        f"{rows}\n\n"
        f"The pass after a turn: {before['seconds'] * 1000:,.0f} ms and {size(before['bytes'])} "
        f"read before the read cache, {after['seconds'] * 1000:,.1f} ms and "
        f"{size(after['bytes'])} now. What a pass with nothing new still does: list the session "
        "directories, stat each log file and read each session's taint file.\n"
    )
