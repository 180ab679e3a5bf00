"""memoryd benchmarks: recall latency (p50, p95) and index build rate at 10k, 100k (and, with
--million, 1M) log records; the cost of one Honcho sync pass over a long history.

    uv run python bench/memory_bench.py [--million] [--queries 200] [--no-write]
    uv run python bench/memory_bench.py --sync-only [--sessions 500 --turns 50]

Each size writes session logs of 1,000 records per session into a temp dir, builds the FTS5
index from them as ``memoryd reindex`` does, and times recall queries of one to three words.
Writes its figures into its own section of docs/performance.md (between the bench:memory
markers), leaving every other section alone; the sync figure (honcho_sync_pass.py) is its own
block inside it (bench:memory-sync), so ``--sync-only`` replaces just that block.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

from bxcore.canonical import canonical_json
from bxcore.records import Assistant, User
from bxcore.tools import DataClass
from honcho_sync_pass import measure_sync, sync_table
from memoryd.index import RecallIndex, StateDb
from memoryd.recall import FtsRetriever
from memoryd.taint import CLEAN
from report import load_note, today

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
START, END = "<!-- bench:memory -->", "<!-- /bench:memory -->"
SYNC_START, SYNC_END = "<!-- bench:memory-sync -->", "<!-- /bench:memory-sync -->"
TIME = "2026-11-30T07:00:00.000000Z"
PER_SESSION = 1000


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
        latencies = []
        for _ in range(queries):
            query = " ".join(rng.choices(words, k=rng.randint(1, 3)))
            started = time.perf_counter()
            retriever.recall(query, 5)
            latencies.append((time.perf_counter() - started) * 1000)
        index.close()
        state.close()
    latencies.sort()
    return {"records": records, "build_s": build, "rate": records / build,
            "p50": statistics.median(latencies),
            "p95": latencies[max(0, int(len(latencies) * 0.95) - 1)]}


def section(results: list[dict[str, float]], queries: int, sync: str) -> str:
    rows = "\n".join(
        f"| {r['records']:,} | {r['build_s']:.1f} s | {r['rate']:,.0f} records/s | "
        f"{r['p50']:.2f} ms | {r['p95']:.2f} ms |" for r in results
    )
    return (
        f"{START}\n## memoryd: recall index\n\n"
        f"`uv run python bench/memory_bench.py` on {platform.machine()}, Python "
        f"{platform.python_version()}, SQLite FTS5. Logs of {PER_SESSION:,} records per "
        f"session, 8-40 random words each; build = indexing every log as `memoryd reindex` "
        f"does; recall = {queries} queries of 1-3 words, k = 5, hit counting included.\n\n"
        "| Records | Build | Build rate | Recall p50 | Recall p95 |\n|---|---|---|---|---|\n"
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
    parser.add_argument("--million", action="store_true", help="also run 1,000,000 records")
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
