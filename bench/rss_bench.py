"""Benchmark: resident memory of each daemon, idle and under 50 concurrent sessions.

    uv run python bench/rss_bench.py [--sessions 50] [--no-write]

Not a test. The whole local stack (``bxctl up``'s code: inferproxy, memoryd, brokerd with its
sandbox, loopd in its own network namespace) with ``bench/fake_llama.py`` in llama-server's
place: 50 sessions' worth of a real model would not run on this machine, and the daemons'
memory does not depend on what the model says. The fake runs in its own process and is not
counted.

Idle: each daemon's VmRSS after start-up (loopd's self-test done). Load: ``--sessions`` channels
each start a new session at once, with a turn whose message makes the fake call ``echo``
through ``call_tool``: so every session has a request through inferproxy, a tool call decided
and audited by brokerd and run in a fresh sandbox, and appends to its log. VmRSS is sampled
every 0.1 s while the turns run; the table shows the peak sample, the kernel's high-water mark
(VmHWM) and what stays resident afterwards. Writes its section of docs/performance.md
(bench:rss).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from report import load_note, machine_line, today, write_section  # noqa: E402
from rig import Stack, StackSettings, fake_llama_binary, running_stack  # noqa: E402

DAEMONS = ("inferproxy", "memoryd", "brokerd", "loopd")
SETTLE = 2.0  # seconds after start-up before the idle reading


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def echo_turn(number: int) -> str:
    call = [["call_tool", {"name": "echo", "arguments": {"text": f"session {number}"}}]]
    return f"Echo my session number.\nDO {json.dumps(call)}"


def grants(directory: Path) -> Path:
    directory.mkdir()
    (directory / "echo.toml").write_text(
        'tools = ["echo"]\nmode = "auto"\nclasses = ["public", "private"]\n'
        'result_class = "public"\n'
    )
    return directory


class Sampler:
    """Samples every daemon's VmRSS on a thread until stopped; keeps the peak of each."""

    def __init__(self, stack: Stack):
        self._stack = stack
        self.peak = dict.fromkeys(DAEMONS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in DAEMONS:
                self.peak[name] = max(self.peak[name], self._stack.rss(name)[0])
            self._stop.wait(0.1)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def run(sessions: int) -> tuple[dict[str, dict[str, int]], dict[str, float]]:
    directory = Path(tempfile.mkdtemp(prefix="bx-rss-"))
    figures: dict[str, dict[str, int]] = {name: {} for name in DAEMONS}
    facts: dict[str, float] = {}
    try:
        with running_stack(
            directory, llama_server=fake_llama_binary(directory), models=directory,
            serving=ROOT / "serving", grants=grants(directory / "grants"),
            settings=StackSettings(),
        ) as stack:
            time.sleep(SETTLE)
            for name in DAEMONS:
                figures[name]["idle"] = stack.rss(name)[0]
            cpu_before = {name: cpu_seconds(stack.pid(name)) for name in DAEMONS}
            start = time.perf_counter()
            with Sampler(stack) as sampler, ThreadPoolExecutor(sessions) as pool:
                turns = list(pool.map(
                    lambda n: stack.turn(f"rss-{n}", echo_turn(n), resume=False), range(sessions)
                ))
            facts["seconds"] = time.perf_counter() - start
            facts["tool_results"] = sum(1 for t in turns if "tool_result" in t.events)
            for name in DAEMONS:
                facts[f"cpu {name}"] = cpu_seconds(stack.pid(name)) - cpu_before[name]
            for name in DAEMONS:
                rss, hwm = stack.rss(name)
                figures[name].update(peak=sampler.peak[name], hwm=hwm, after=rss)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return figures, facts


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def render(figures: dict[str, dict[str, int]], facts: dict[str, float], sessions: int) -> str:
    rows = [
        f"| {name} | {mib(f['idle'])} | {mib(f['peak'])} | {mib(f['hwm'])} | {mib(f['after'])} "
        f"| {facts[f'cpu {name}']:.2f} |"
        for name, f in figures.items()
    ]
    total = {key: sum(f[key] for f in figures.values()) for key in ("idle", "peak", "after")}
    cpu = sum(facts[f"cpu {name}"] for name in figures)
    rows.append(f"| **all four** | **{mib(total['idle'])}** | **{mib(total['peak'])}** | | "
                f"**{mib(total['after'])}** | **{cpu:.2f}** |")
    return f"""## Daemon memory, idle and with {sessions} sessions at once (`bench/rss_bench.py`)

Measured {today()} on {machine_line()}; {load_note()} at the end. The whole local stack
with `bench/fake_llama.py` (a fake inference server, the fault suite's scripted model, in its
own process and not counted) in llama-server's place. Load: {sessions} channels each start a
new session at the same moment, with a turn whose model answer calls `echo` through `call_tool`
(brokerd decides, audits and runs it in a fresh sandbox) and then answers. All {sessions}
turns were done in {facts["seconds"]:.1f} s, {facts["tool_results"]:.0f} of them with a tool
result. VmRSS in MiB; *peak* is the highest 0.1 s sample during the load, *VmHWM* the kernel's
high-water mark since start, *after* what stays resident once the turns are done; *CPU s*:
the user and system time each daemon used from the start of the load to its end (what it did
for these turns).

| daemon | idle | peak under load | VmHWM | after | CPU s |
|---|---|---|---|---|---|
{chr(10).join(rows)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    figures, facts = run(args.sessions)
    text = render(figures, facts, args.sessions)
    print(text if args.no_write else write_section("rss", text))


if __name__ == "__main__":
    main()
