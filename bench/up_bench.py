"""A chat that opens in seconds: `scripts/up` warm (everything cached), from the command to the
point where the chat opens, and each part of it measured on its own.

`scripts/up --no-chat` runs twice in a private state directory (the first makes the state,
warms the page cache and sends the self-test's generating checks once; its time to the chat and
those requests are shown beside), then the parts alone: scripts/setup, the models' hash check,
and, from the second run's logs, llama-server's model load and each of loopd's self-test
requests (prompt and generated tokens, and their time). The machine's load
average is written beside every figure: on a 2-core machine shared with other work the model's
requests take many times longer than on a quiet one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from report import ROOT, load_note, machine_line, today, write_section

ENV = {**os.environ, "PATH": f"{Path.home() / '.local' / 'bin'}:{os.environ['PATH']}"}
TIMING = re.compile(
    r"task (\d+) \|\s+(prompt eval|eval|total) time =\s+([\d.]+) ms /\s+(\d+) tokens")
LOADED = re.compile(r"\[(\d+)\] (\d+)\.(\d+)\.(\d+)\.(\d+) I srv  llama_server: model loaded")


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, cwd=ROOT, env=ENV, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def up_once(state: Path) -> list[tuple[float, str]]:
    """scripts/up --no-chat; each line it printed with the seconds since the command, then the
    stack stopped again."""
    start = time.monotonic()
    proc = subprocess.Popen([str(ROOT / "scripts" / "up"), "--no-chat", "--state", str(state)],
                            cwd=ROOT, env=ENV, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    assert proc.stderr is not None
    lines = [(time.monotonic() - start, line.rstrip()) for line in proc.stderr]
    code = proc.wait()
    subprocess.run(["uv", "run", "--frozen", "bxctl", "down", "--state", str(state)], cwd=ROOT,
                   env=ENV, check=False, capture_output=True)
    if code != 0:
        raise SystemExit("scripts/up failed:\n" + "\n".join(text for _, text in lines))
    return lines


def at(lines: list[tuple[float, str]], prefix: str) -> float:
    return next(t for t, text in lines if text.startswith(prefix))


def requests(log: str, run: int = -1) -> list[dict[str, float]]:
    """The self-test's requests from the llama-server log of one run (the last by default): per
    task, its prompt and generated tokens and times (ms)."""
    part = log.split("llama_server: starting server in router mode")[run]
    tasks: dict[str, dict[str, float]] = {}
    for task, kind, ms, tokens in TIMING.findall(part):
        row = tasks.setdefault(task, {})
        row[f"{kind} ms"] = float(ms)
        row[f"{kind} n"] = float(tokens)
    return list(tasks.values())


def model_load_s(log: str) -> float | None:
    """The child's own clock when it logged `model loaded`: its start to a loaded model."""
    last = log.rsplit("llama_server: starting server in router mode", 1)[-1]
    match = LOADED.search(last)
    if match is None:
        return None
    _, minutes, seconds, millis, _micros = (int(g) for g in match.groups())
    return minutes * 60 + seconds + millis / 1000


QUIET_PROMPT = 50
QUIET_GENERATED = 8
NAMES = ("tool_call", "round_trip", "slot_switch A", "slot_switch B", "slot_switch A again")


def task_rows(tasks: list[dict[str, float]]) -> str:
    # A warm start skips the requests of checks that passed before, the probe's first
    # (docs/decisions/probe-once-per-server.md, slot-switch-once-per-server.md).
    names = NAMES[len(NAMES) - len(tasks):] if len(tasks) <= len(NAMES) else NAMES
    rows = [
        f"| {names[i] if i < len(names) else f'request {i + 1}'} | "
        f"{task.get('prompt eval n', 0):.0f} | {task.get('eval n', 0):.0f} | "
        f"{task.get('total ms', 0) / 1000:.1f} |"
        for i, task in enumerate(tasks)
    ]
    return "\n".join(rows) or "| none | 0 | 0 | 0 |"


def render(lines: list[tuple[float, str]], parts: dict[str, tuple[float, str]],
           load: float | None, tasks: list[dict[str, float]], note: str,
           first: list[tuple[float, str]], first_tasks: list[dict[str, float]]) -> str:
    running = at(lines, "up: running")
    # each line by its first word (what follows may hold this run's paths)
    steps = [("up: " + text.split()[1].rstrip(":;"), t) for t, text in lines
             if text.startswith("up: ") and len(text.split()) > 1]
    rows = [f"| {name} | {t:.1f} |" for name, t in steps if name != "up: running"]
    part_rows = [f"| {name} | {seconds:.2f} | {load_at} |" for name, (seconds, load_at)
                 in parts.items()]
    if load is not None:
        part_rows.append(f"| llama-server: the model's load (router child start to loaded) | "
                         f"{load:.1f} | {note} |")
    prompt = sum(t.get("prompt eval n", 0) for t in first_tasks)
    generated = sum(t.get("eval n", 0) for t in first_tasks)
    return f"""## `scripts/up`, warm: the command to the chat (`bench/up_bench.py`)

{today()}, {machine_line()}; {note} at the end of the measured run. Figures from
`scripts/bench up`: `scripts/up --no-chat` run twice in a private state directory, the second
reported (everything cached: the llama-server build, the models and their hash stamps, the venv,
the state directory). The chat opens right after `up: running` (`bxctl chat` on loop.sock).

**Warm, the command to `up: running`: {running:.1f} s.** The first run, whose loopd sends the
self-test's generating checks (once per server build, model, template and flags:
docs/decisions/probe-once-per-server.md, docs/decisions/slot-switch-once-per-server.md), took
{at(first, "up: running"):.1f} s. Each line the second run printed, seconds since the command:

| line | s |
|---|---|
{chr(10).join(rows)}
| up: running (the chat opens) | {running:.1f} |

The parts, each measured alone (load average when measured):

| part | s | load |
|---|---|---|
{chr(10).join(part_rows)}

loopd's self-test (before loop.sock is bound), from llama-server's log: the 1.5B's requests on
the background slot, tokens processed and generated, and their time. The reported (warm) run:

| request | prompt tokens processed | tokens generated | s |
|---|---|---|---|
{task_rows(tasks)}

The first run, which sends them once for this server, model, template and flags:

| request | prompt tokens processed | tokens generated | s |
|---|---|---|---|
{task_rows(first_tasks)}

Generated tokens cost most: each is a pass over the whole model, where prompt tokens go through
in batches. At quiet-machine rates for the 1.5B (about {QUIET_PROMPT} prompt tokens and
{QUIET_GENERATED} generated a second: the tiny Qwen's measured 150 and 23 over three, the 1.5B's
slowdown) the first run's {prompt:.0f} prompt and {generated:.0f} generated tokens are about
{prompt / QUIET_PROMPT + generated / QUIET_GENERATED:.0f} s; that run took
{sum(t.get('total ms', 0) for t in first_tasks) / 1000:.0f} s for them. A warm start waits only
for the model's load (above) and the budget's token counts before it binds loop.sock.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    parts: dict[str, tuple[float, str]] = {}
    parts["scripts/setup (apt check, uv sync, llama-server and models, caches)"] = (
        timed([str(ROOT / "scripts" / "setup")]), load_note())
    parts["the models' hash check (scripts/llama-server.sh models, stamps valid)"] = (
        timed([str(ROOT / "scripts" / "llama-server.sh"), "models"]), load_note())
    with tempfile.TemporaryDirectory(prefix="bench-up-") as state:
        first = up_once(Path(state))
        lines = up_once(Path(state))
        note = load_note()
        log = (Path(state) / "logs" / "llama-server.log").read_text(errors="replace")
    text = render(lines, parts, model_load_s(log), requests(log), note, first,
                  requests(log, 1))
    print(text if args.no_write else write_section("up", text))


if __name__ == "__main__":
    main()
