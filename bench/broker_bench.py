"""brokerd benchmarks: decision latency, audit append rate with fsync (one session, and 50
sessions at once sharing fsyncs by group commit), verify rate at 1M records, and the time the
audit log takes to open on that log (its head found from the end, also behind a 1 MiB record).

    uv run python bench/broker_bench.py [--records 1000000] [--appends 2000] [--no-write]

Writes its figures into its own section of docs/performance.md (between the bench:broker
markers), leaving every other section alone.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from brokerd.audit import AuditLog, verify
from brokerd.audit.records import GENESIS, DecisionEntry, line_of
from brokerd.policy import CallArguments, decide, parse_grant
from brokerd.taint import CLEAN
from bxcore.tools import DecisionRecord, ToolRequest
from bxcore.util import sha256
from report import load_note, machine_line, today, write_section

SESSIONS = 50
NOW = datetime(2026, 11, 30, tzinfo=UTC)
RECORD = DecisionRecord(session="bench", call=0, tool="fs.read",
                        arguments_sha256=sha256(b"{}"), verdict="deny", grant=None,
                        reason="no grant matches")


def grants(count: int):
    made = []
    for i in range(count):
        text = (f'tools = ["fs.read", "fs.list"]\nmode = "{"auto" if i % 3 else "ask"}"\n'
                f'classes = ["public", "private"]\n[arguments.path]\n'
                f'paths = ["/home/o/dir{i}/**", "/srv/share{i}/*.md"]\n'
                f'[sandbox]\nmounts = [{{ path = "/home/o/dir{i}" }}]\n')
        made.append(parse_grant(text, f"g{i:03}.toml", home=Path("/home/o"),
                                resolve=lambda p: p))
    made.append(parse_grant('tools = ["*"]\nmode = "deny"\n[arguments.path]\n'
                            'paths = ["/home/o/.ssh/**"]\n', "ssh.toml", home=Path("/home/o"),
                            resolve=lambda p: p))
    return tuple(made)


def bench_decide(grant_count: int, rounds: int) -> dict[str, float]:
    table = grants(grant_count)
    target = f"/home/o/dir{grant_count - 1}/notes/today.md"
    request = ToolRequest(session="bench", call=1, tool="fs.read",
                          arguments=f'{{"path": "{target}"}}')
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        decide(request, table, arguments=CallArguments.parse(request.arguments), now=NOW,
               taint=CLEAN, resolved_paths={"path": target}, secrets={})
        samples.append(time.perf_counter_ns() - started)
    samples.sort()
    return {"p50_us": samples[len(samples) // 2] / 1000,
            "p99_us": samples[int(len(samples) * 0.99)] / 1000,
            "mean_us": statistics.fmean(samples) / 1000}


def bench_append(directory: Path, count: int, sessions: int) -> dict[str, float]:
    """``sessions`` sessions at once, each appending its share of ``count`` records one after
    another (each awaits its record's fsync before the next, as a call does)."""
    log = AuditLog(directory)

    async def session(records: int) -> None:
        for _ in range(records):
            await log.decision(decision=RECORD)

    async def together() -> None:
        await asyncio.gather(*(session(count // sessions) for _ in range(sessions)))

    started = time.perf_counter()
    asyncio.run(together())
    elapsed = time.perf_counter() - started
    written = count // sessions * sessions
    return {"rate": written / elapsed, "fsyncs": log.fsyncs / written}


def write_log(directory: Path, count: int, per_file: int) -> None:
    """A valid chain of ``count`` records, written without fsync (only verify is timed)."""
    previous, handle, started = GENESIS, None, "2026-11-30T00:00:00.000000Z"
    for seq in range(1, count + 1):
        if (seq - 1) % per_file == 0:
            if handle:
                handle.close()
            handle = (directory / f"{(seq - 1) // per_file + 1:08d}.jsonl").open("wb")
        entry = DecisionEntry(seq=seq, time=started, prev=previous, decision=RECORD)
        line, previous = line_of(entry)
        handle.write(line)
    if handle:
        handle.close()


def bench_verify(directory: Path, count: int) -> dict[str, float]:
    write_log(directory, count, per_file=250_000)
    files = [p for p in directory.iterdir() if p.suffix == ".jsonl"]
    size = sum(p.stat().st_size for p in files)
    started = time.perf_counter()
    bad, head = verify(directory)
    elapsed = time.perf_counter() - started
    assert not bad and head.count == count, (bad[:3], head)
    return {"seconds": elapsed, "per_second": count / elapsed, "mib": size / 2**20,
            "files": len(files), "bound": hashing_bound(sorted(files))}


def bench_open(directory: Path) -> dict[str, float]:
    """Seconds to open the log ``bench_verify`` wrote (what brokerd's start-up does with the
    audit log), then again with a last record of over 1 MiB written before records were
    bounded (its head is read back to that record's start)."""
    started = time.perf_counter()
    AuditLog(directory)
    plain = time.perf_counter() - started
    newest = sorted(p for p in directory.iterdir() if p.suffix == ".jsonl")[-1]
    last = newest.read_bytes()[:-1].rsplit(b"\n", 1)[-1]
    tail = json.loads(last)
    huge = RECORD.model_copy(update={"reason": "h" * (1024 * 1024)})
    entry = DecisionEntry(seq=tail["seq"] + 1, time="2026-11-30T00:00:00.000000Z",
                          prev=tail["hash"], decision=huge)
    with newest.open("ab") as handle:
        handle.write(line_of(entry)[0])
    started = time.perf_counter()
    AuditLog(directory)
    return {"plain_ms": plain * 1000, "huge_ms": (time.perf_counter() - started) * 1000}


def hashing_bound(files: list[Path]) -> float:
    """Records per second that reading the files and hashing each line alone allows: the floor
    under any verify, measured in the same run on the same bytes."""
    started, lines = time.perf_counter(), 0
    for path in files:
        for line in path.read_bytes().split(b"\n")[:-1]:
            hashlib.sha256(line).digest()
            lines += 1
    return lines / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--grants", type=int, default=50)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    decided = bench_decide(args.grants, 20_000)
    with tempfile.TemporaryDirectory(prefix="broker-bench-") as scratch:
        serial = bench_append(Path(scratch) / "serial", args.appends, 1)
        together = bench_append(Path(scratch) / "together", args.appends, SESSIONS)
        verified = bench_verify(Path(scratch), args.records)
        opened = bench_open(Path(scratch))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    latency = " / ".join(f"{decided[k]:.1f}" for k in ("p50_us", "p99_us", "mean_us"))
    log_size = f"{verified['mib']:.0f} MiB, {verified['files']} files"
    verify_rate = (f"{verified['seconds']:.1f} s, {verified['per_second']:,.0f} records/s "
                   f"(reading and hashing each line alone: {verified['bound']:,.0f}/s)")
    appends = [f"{each['rate']:,.0f} records/s, {each['fsyncs']:.3f} fsyncs per record"
               for each in (serial, together)]
    text = f"""
## brokerd (`bench/broker_bench.py`)

Measured {today()} on {machine_line()}, {load_note()}; the audit files in the temp directory.

| What | Figure | Bound |
|---|---|---|
| `decide` with {args.grants + 1} grants for the tool (median / p99 / mean) | {latency} µs | |
| Audit append, 1 session ({args.appends} records) | {appends[0]} | |
| Audit append, {SESSIONS} sessions at once ({args.appends} records) | {appends[1]} | \
fewer fsyncs than records (issue 19) |
| `verify` of a whole {args.records:,}-record log ({log_size}) | {verify_rate} | \
≥ 200,000 records/s (issue 19) |
| Audit log open on that log (its head, from the end) | {opened['plain_ms']:.1f} ms; \
{opened['huge_ms']:.1f} ms behind a 1 MiB last record | the last record, not the log (issue 31) |
| Peak memory of the benchmark process | {peak:.0f} MiB | |
"""
    print(text)
    if not args.no_write:
        write_section("broker", text)


if __name__ == "__main__":
    main()
