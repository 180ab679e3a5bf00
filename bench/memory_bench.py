"""memoryd benchmarks: recall latency (p50, p95) and index build rate at 10k, 100k (and, with
--million, 1M) log records; the cost of one Honcho sync pass over a long history.

    uv run python bench/memory_bench.py [--million] [--queries 200] [--no-write]
    scripts/bench --long memory   (BOXMAKER_BENCH_LONG=1: --million)
    uv run python bench/memory_bench.py --sync-only [--sessions 500 --turns 50]

Each size writes session logs of 1,000 records per session into a temp dir, builds the FTS5
index from them as ``memoryd reindex`` does, and times recall queries of one to three words.
Writes its figures into its own section of docs/performance.md (between the bench:memory
markers), leaving every other section alone; the sync figure (honcho_sync_pass.py) is its own
block inside it (bench:memory-sync), so ``--sync-only`` replaces just that block.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from bxcore.canonical import canonical_json
from bxcore.records import Assistant, User
from bxcore.tools import DataClass
from honcho_sync_pass import measure_sync, sync_table
from memoryd.index import RecallIndex, StateDb
from memoryd.recall import FtsRetriever
from memoryd.taint import CLEAN, SessionTaint
from report import load_note, machine_line, quantile, today

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
START, END = "<!-- bench:memory -->", "<!-- /bench:memory -->"
SYNC_START, SYNC_END = "<!-- bench:memory-sync -->", "<!-- /bench:memory-sync -->"
TIME = "2026-11-30T07:00:00.000000Z"
PER_SESSION = 1000
BOUND = {1_000_000: "≤ 20 ms (issue 19)"}


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def write_logs(sessions: Path, records: int, words: list[str], rng: random.Random) -> None:
    for first in range(0, records, PER_SESSION):
        directory = sessions / f"bench-{first // PER_SESSION:06d}"
        directory.mkdir(parents=True)
        lines = []
        for i in range(min(PER_SESSION, records - first)):
            text = " ".join(rng.choices(words, k=rng.randint(8, 40)))
            record = (User(time=TIME, content=text) if i % 2 == 0 else
                      Assistant(time=TIME, content=text, reasoning_content=None, tool_calls=None))
            lines.append(canonical_json(record))
        (directory / "0.jsonl").write_bytes(b"\n".join(lines) + b"\n")


# The asking session reads every table the index can fill (recall-per-label.md): the most work.
WIDEST = SessionTaint(DataClass.PRIVATE, untrusted=True)


def measure(records: int, queries: int, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    words = vocabulary(rng)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        write_logs(home / "sessions", records, words, rng)
        index = RecallIndex(home / "recall.sqlite", home / "sessions", DataClass.PRIVATE)
        state = StateDb(home / "state.sqlite")
        started = time.perf_counter()
        index.catch_up(lambda session: CLEAN, [])
        build = time.perf_counter() - started
        retriever = FtsRetriever(index, state, snippet_chars=400)
        latencies, cpu = [], []
        for _ in range(queries):
            query = " ".join(rng.choices(words, k=rng.randint(1, 3)))
            started, started_cpu = time.perf_counter(), time.thread_time()
            retriever.recall(query, 5, WIDEST)
            latencies.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - started_cpu) * 1000)
        load = load_note()
        index.close()
        state.close()
    return {"records": records, "build_s": build, "rate": records / build,
            "p50": quantile(latencies, 0.5), "p95": quantile(latencies, 0.95),
            "cpu_p95": quantile(cpu, 0.95), "load": load}


def section(results: list[dict], queries: int, sync: str) -> str:
    rows = "\n".join(
        f"| {r['records']:,} | {r['build_s']:.1f} s | {r['rate']:,.0f} records/s | "
        f"{r['p50']:.2f} ms | {r['p95']:.2f} ms | {r['cpu_p95']:.2f} ms | "
        f"{BOUND.get(r['records'], '')} | {r['load']} |" for r in results
    )
    return (
        f"{START}\n## memoryd: recall index\n\n"
        f"`uv run python bench/memory_bench.py` (the 1,000,000 row: `scripts/bench --long "
        f"memory`), measured {today()} on {machine_line()}, SQLite {sqlite3.sqlite_version} "
        f"FTS5. Logs of {PER_SESSION:,} records per session, 8-40 random words each; build = "
        f"indexing every log as `memoryd reindex` does; recall = {queries} queries of 1-3 "
        f"words, k = 5, hit counting included; CPU = the thread's CPU time for the same "
        f"queries; load = the load average when the queries ended.\n\n"
        "| Records | Build | Build rate | Recall p50 | Recall p95 | Recall CPU p95 | "
        "Bound (p95) | Load |\n|---|---|---|---|---|---|---|---|\n"
        f"{rows}\n\n{sync}{END}\n"
    )


def sync_section(result: dict) -> str:
    return (
        f"{SYNC_START}\n### memoryd: one Honcho sync pass\n\n"
        f"`uv run python bench/memory_bench.py --sync-only`, measured {today()}, {load_note()}. "
        f"{sync_table(result)}{SYNC_END}\n"
    )


def replace_between(old: str, text: str, start: str, end: str, *, inside: str | None) -> str:
    """``text`` (its markers included) in place of start..end, or just before ``inside`` (a
    closing marker) when the block is not there yet, or at the end."""
    if start in old and end in old:
        before, rest = old.split(start, 1)
        return before + text.rstrip("\n") + rest.split(end, 1)[1]
    if inside is not None and inside in old:
        before, rest = old.split(inside, 1)
        return before.rstrip("\n") + "\n\n" + text + inside + rest
    return old.rstrip("\n") + "\n\n" + text


def write_section(text: str) -> None:
    old = DOC.read_text() if DOC.exists() else "# Performance\n\n"
    DOC.write_text(replace_between(old, text, START, END, inside=None))


def write_sync_block(text: str) -> None:
    old = DOC.read_text() if DOC.exists() else "# Performance\n\n"
    DOC.write_text(replace_between(old, text, SYNC_START, SYNC_END, inside=END))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true",
                        default=os.environ.get("BOXMAKER_BENCH_LONG") == "1",
                        help="also run 1,000,000 records (default with BOXMAKER_BENCH_LONG=1, "
                             "which scripts/bench --long sets)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sync-only", action="store_true",
                        help="only the Honcho sync pass; replaces only its block in the doc")
    parser.add_argument("--sessions", type=int, default=500, help="sync pass: sessions")
    parser.add_argument("--turns", type=int, default=50, help="sync pass: turns per session")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch the doc")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sync = measure_sync(Path(tmp), args.sessions, args.turns, vocabulary(random.Random(7)))
    print(sync, flush=True)
    sync_text = sync_section(sync)
    if args.sync_only:
        print(sync_text)
        if not args.no_write:
            write_sync_block(sync_text)
        return
    sizes = [10_000, 100_000] + ([1_000_000] if args.million else [])
    results = []
    for size in sizes:
        results.append(measure(size, args.queries))
        print(results[-1], flush=True)
    text = section(results, args.queries, sync_text)
    print(text)
    if not args.no_write:
        write_section(text)


if __name__ == "__main__":
    main()
