"""Write docs/reliability.md's long-run section from a run's ledger (tests/faults/ledger.py):
which tests ran, each fuzzer's inputs, outcome and time, the crash trials by outcome, and the
wall time. scripts/reliability calls it when its lanes end (finished or stopped), so every
figure in the section is the run's own.

    python tests/faults/runreport.py LEDGER --started EPOCH --ended EPOCH --setting K=V ...
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.docsection import load_note, machine_line, write_section

from faults.ledger import read

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
TAG = "reliability:"  # and the section's name: long-run unless the run says otherwise
OUTCOMES = ("recovered", "point not reached", "refused as corrupt", "failed")


def latest(lines: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The last line of each name: a finished part's result, or a stopped one's progress."""
    last: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line["kind"] == kind:
            last[line["name"]] = line
    return last


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def projection(fuzzers: dict[str, dict[str, Any]], crash: dict[str, Any] | None,
               target: int) -> str:
    """What the whole long profile costs at this run's own rates: the fuzzers' CPU per input
    times the target count, the crash trials' wall time per trial times the planned trials."""
    cpu = sum(line["cpu_seconds"] / line["inputs"] * target for line in fuzzers.values()
              if line.get("cpu_seconds") and line["inputs"])
    measured = sum(1 for line in fuzzers.values() if line.get("cpu_seconds") and line["inputs"])
    text = (f"At this run's CPU per input, {target:,} inputs of each of the {measured} fuzzers "
            f"measured cost {cpu / 3600:.2f} hours of one core")
    if crash and crash["trials"]:
        per_trial = crash["seconds"] / crash["trials"]
        text += (f"; at its {per_trial:.0f} s of wall time per crash trial, "
                 f"{crash['planned']} trials take {per_trial * crash['planned'] / 3600:.2f} hours")
    return text + "."


def fuzz_part(lines: list[dict[str, Any]], tests: dict[str, dict[str, Any]]) -> list[str]:
    fuzzers = latest(lines, "fuzz")
    if not fuzzers:
        return ["No fuzzer ran."]
    where = {nodeid.split("::")[-1]: nodeid for nodeid in tests}
    rows = ["| Fuzz test | Inputs | Outcome | Wall | CPU per input |", "|---|---:|---|---:|---:|"]
    for name, line in sorted(fuzzers.items(), key=lambda item: where.get(item[0].split("::")[1],
                                                                         item[0])):
        test = where.get(name.split("::")[1], name)
        outcome = line["outcome"]
        if outcome == "running":
            outcome = "stopped unfinished (its process ended first; see the lane's log)"
        elif outcome == "failed":
            outcome = f"**failed**: {line['error']}"
        cpu = line.get("cpu_seconds")
        per_input = f"{cpu / line['inputs'] * 1000:.2f} ms" if cpu and line["inputs"] else "-"
        rows.append(f"| `{test}` | {line['inputs']:,} | {outcome} | {line['seconds']:.0f} s "
                    f"| {per_input} |")
    ends = Counter(line["outcome"] for line in fuzzers.values())
    failed = [name for name, line in fuzzers.items() if line["outcome"] == "failed"]
    total = sum(line["inputs"] for line in fuzzers.values())
    summary = (f"{len(fuzzers)} fuzz tests ran: {ends['passed']} passed all their inputs, "
               f"{ends['stopped at its time budget']} stopped at their time budget (every input "
               f"run passed), {ends['running']} were stopped unfinished; {total:,} inputs in all; "
               f"failures found: {len(failed)}" + (f" ({', '.join(failed)})." if failed else "."))
    return [summary, "", *rows]


def crash_part(lines: list[dict[str, Any]]) -> list[str]:
    series = latest(lines, "crash")
    line = series.get("done") or series.get("running")
    if line is None:
        return ["No crash trial ran."]
    outcomes = Counter(line["outcomes"])
    stopped = "" if "done" in series else (" (stopped unfinished: its process ended before the "
                                           "series did; the lane's log says why)")
    if "done" in series and line["trials"] < line["planned"] and not line.get("failed"):
        stopped = f" (no trial started after its budget, `CRASH_SECONDS={line['budget']:.0f}`)"
    text = (f"{line['trials']} of {line['planned']} planned crash trials ran{stopped}, seed "
            f"{line['seed']}, in {minutes(line['seconds'])}; by victim "
            + ", ".join(f"{role} {n}" for role, n in line["per_victim"].items())
            + "; crash points offered by the counted turn: "
            + ", ".join(f"{role} {n}" for role, n in line["offered"].items()) + ". Outcomes: "
            + ", ".join(f"{name} {outcomes[name]}" for name in OUTCOMES)
            + f". Turns acknowledged (`turn_done` seen) before their kill: "
            f"{line['acknowledged']}, every one of them in its log.")
    if line.get("failed"):
        text += f" The failing trial: {line['failed']}."
    return [text]


def tests_part(tests: dict[str, dict[str, Any]]) -> list[str]:
    outcomes = Counter(line["outcome"] for line in tests.values())
    rows = ["| Test | Outcome | Time |", "|---|---|---:|"]
    rows += [f"| `{nodeid}` | {line['outcome']} | {line['seconds']:.0f} s |"
             for nodeid, line in sorted(tests.items())]
    return [f"Tests run: {len(tests)} (" + ", ".join(f"{n} {o}" for o, n in outcomes.items())
            + "); a test stopped by the end of the run has no line.", "", *rows]


def report(ledger: str, started: float, ended: float, settings: list[str],
           doc: Path = DOC, section: str = "long-run") -> str:
    lines = read(ledger)
    tests = latest(lines, "test")
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(started))
    ran = " ".join(f"`{s}`" for s in settings) or "the defaults"
    head = (f"Run of {stamp} UTC by `scripts/reliability` with {ran}: wall time "
            f"{minutes(ended - started)}, ended at {time.strftime('%H:%M', time.gmtime(ended))} "
            f"UTC; {machine_line()}; at the end {load_note()}.")
    crash = latest(lines, "crash")
    target = int(dict(s.split("=", 1) for s in settings).get("FUZZ_EXAMPLES", "100000"))
    cost = projection(latest(lines, "fuzz"), crash.get("done") or crash.get("running"), target)
    body = [head, "", "**Fuzzers.**", "", *fuzz_part(lines, tests), "", "**Crash trials.**", "",
            *crash_part(lines), "", "**What the whole long profile costs.**", "", cost, "",
            "**Every test of the run.**", "", *tests_part(tests)]
    return write_section(doc, TAG + section, "\n".join(body), "# Reliability")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ledger")
    parser.add_argument("--started", type=float, required=True)
    parser.add_argument("--ended", type=float, required=True)
    parser.add_argument("--setting", action="append", default=[],
                        help="a setting of the run, as K=V, named in the report")
    parser.add_argument("--section", default="long-run",
                        help="the section of docs/reliability.md this run owns")
    args = parser.parse_args()
    print(report(args.ledger, args.started, args.ended, args.setting, section=args.section))


if __name__ == "__main__":
    main()
