"""Benchmark: an owner's day of threads interleaved on the main slot, on the real server.

    uv run python bench/day_bench.py [--threads 20] [--turns 6] [--job-turns 4] [--seed 1]
                                     [--restart-at N] [--no-write]

Not a test. The whole local stack (``bxctl up``'s code, as bench/cache_bench.py runs it: the
tiny Qwen with the bare-JSON tool template, inferproxy, memoryd, brokerd with its sandbox, loopd)
serves ``--threads`` main sessions (one per Mattermost thread) of ``--turns`` turns each, in the
order replies would arrive: a seeded random interleaving that keeps each thread's own order.
Every third turn of a thread reads a note with ``fs.read`` through ``call_tool``; a thread's
first message is long for one thread in three (a pasted document). A job (a background
session, on the background slot) takes a turn after every ``--threads`` main turns. loopd is
restarted once, before turn ``--restart-at`` of the day (default: halfway).

Per completion, from the Usage records loopd wrote: *processed* (``prompt_n``) and *new*: what
the request adds to its session, ``cache_n + prompt_n`` minus what the session's previous
completion left in the slot (for a session's first request, its whole prompt). New tokens are
the physical limit: a server that forgot nothing would process exactly those. *Re-read* is the
rest: what the session had in the slot and the request did not find cached. The goal of issue
21: processed <= 1.2x new. Projected to the owner's host with the design brief's prompt
processing speed (1,170 tokens/s at depth 0, 669 at 32k, linear in between and flat beyond), for
this run and for the same requests had every return to a thread re-read it whole (what the
shared main slot cost before the session marker). Writes its section of docs/performance.md
(bench:day).
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bxcore.records import Usage  # noqa: E402
from cache_bench import (  # noqa: E402
    DEPTH_0,
    DEPTH_32K,
    MAX_TOKENS,
    MODEL,
    grants,
    presets,
    system_text,
    write_notes,
)
from report import load_note, machine_line, today, write_section  # noqa: E402
from rig import StackSettings, running_stack, serving_dir  # noqa: E402
from support.llama import llama_paths  # noqa: E402

SLOT_CONTEXT = 16384  # a long thread of the day (about 3,000 tokens) stays in its first epoch
JOB = "day-job"


@dataclass(frozen=True)
class Step:
    session: str
    kind: str  # main | background
    text: str
    tool_choice: tuple[str, ...]


def day(threads: int, turns: int, job_turns: int, notes: list[Path], seed: int) -> list[Step]:
    """The day's turns in arrival order: threads interleaved at random, each in its own order;
    the job's turns spread evenly."""
    order = [t for t in range(threads) for _ in range(turns)]
    random.Random(seed).shuffle(order)
    done = [0] * threads
    steps: list[Step] = []
    job_done = 0
    for index, thread in enumerate(order, 1):
        turn = done[thread] = done[thread] + 1
        steps.append(Step(f"day-thread-{thread:02d}", "main", *_text(thread, turn, notes)))
        if index % threads == 0 and job_done < job_turns:
            job_done += 1
            note = notes[(job_done * 7) % len(notes)]
            steps.append(Step(JOB, "background", _read(note, "Job: check this note."),
                              ("required", "none")))
    return steps


def _text(thread: int, turn: int, notes: list[Path]) -> tuple[str, tuple[str, ...]]:
    if turn % 3 == 0:
        note = notes[(thread + turn) % len(notes)]
        return _read(note, "Look at this note for me."), ("required", "none")
    if turn == 1 and thread % 3 == 0:
        pasted = notes[thread % len(notes)].read_text()
        return f"Here is something I wrote down; keep it in mind.\n\n{pasted}", ("none",)
    return f"Thread {thread}, message {turn}: answer in one short sentence, please.", ("none",)


def _read(note: Path, intro: str) -> str:
    return (f'{intro} Use call_tool to run fs.read with the argument "path": "{note}", then '
            "tell me in one sentence what the note is about.")


@dataclass(frozen=True)
class Completion:
    session: str
    kind: str
    cache_n: int
    prompt_n: int
    new: int
    held: int  # what the session's previous completion left in the slot (0 for its first)


def completions(usages: dict[str, tuple[str, list[Usage]]]) -> list[Completion]:
    result = []
    for session, (kind, records) in usages.items():
        held = 0
        for usage in records:
            total = usage.cache_n + usage.prompt_n
            result.append(Completion(session, kind, usage.cache_n, usage.prompt_n,
                                     max(0, total - held), held))
            held = total + usage.predicted_n
    return result


def seconds_on_host(start: int, tokens: int) -> float:
    """Prompt processing time of ``tokens`` tokens after ``start`` already in the slot."""
    def speed(depth: float) -> float:
        return DEPTH_0 + (DEPTH_32K - DEPTH_0) * min(depth, 32768.0) / 32768.0

    return tokens / speed(start + tokens / 2)


def run(args: argparse.Namespace) -> tuple[list[Completion], dict[str, object]]:
    directory = Path(tempfile.mkdtemp(prefix="bx-day-"))
    notes = write_notes(directory / "notes")
    steps = day(args.threads, args.turns, args.job_turns, notes, args.seed)
    restart_at = args.restart_at or len(steps) // 2
    settings = StackSettings(model=MODEL, max_tokens=MAX_TOKENS, per_slot_context=SLOT_CONTEXT,
                             slot_count=2, temperature=0.0,
                             system=system_text(secrets.token_hex(6)))
    binary, models = llama_paths()
    facts: dict[str, object] = {"steps": len(steps), "restart_at": restart_at}
    try:
        with running_stack(
            directory, llama_server=binary, models=models,
            serving=serving_dir(directory, presets(SLOT_CONTEXT, slots=2)),
            grants=grants(directory / "grants", directory / "notes"), settings=settings,
        ) as stack:
            seen: set[str] = set()
            seconds = 0.0
            for number, step in enumerate(steps, 1):
                if number == restart_at:
                    stack.restart("loopd")
                timed = stack.turn(step.session, step.text, resume=step.session in seen,
                                   tool_choice=step.tool_choice, kind=step.kind)  # type: ignore[arg-type]
                seen.add(step.session)
                seconds += timed.seconds
                print(f"{number}/{len(steps)} {step.session}: {timed.seconds:.1f} s",
                      file=sys.stderr)
            usages = {s: ("background" if s == JOB else "main",
                          [r for r in stack.records(s) if isinstance(r, Usage)]) for s in seen}
            facts["cache_losses"] = sum(
                1 for s in seen for r in stack.records(s) if r.type == "cache_loss")
            facts["seconds"] = seconds
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return completions(usages), facts


def render(done: list[Completion], facts: dict[str, object], args: argparse.Namespace) -> str:
    rows = []
    for kind in ("main", "background"):
        part = [c for c in done if c.kind == kind]
        processed, new = sum(c.prompt_n for c in part), sum(c.new for c in part)
        reread = sum(max(0, c.held - c.cache_n) for c in part)
        rows.append(f"| {kind} | {len({c.session for c in part})} | {len(part)} | {new:,} | "
                    f"{processed:,} | {reread:,} | {processed / max(new, 1):.2f}x |")
    processed, new = sum(c.prompt_n for c in done), sum(c.new for c in done)
    ratio = processed / max(new, 1)
    rows.append(f"| **all** | | **{len(done)}** | **{new:,}** | **{processed:,}** | | "
                f"**{ratio:.2f}x** |")
    host = sum(seconds_on_host(c.cache_n, c.prompt_n) for c in done)
    # The same requests had each return to a session found nothing of it but the template's
    # first tokens: every completion after a session's first re-reads what it held.
    before = sum(seconds_on_host(0, c.cache_n + c.prompt_n) if c.held else
                 seconds_on_host(c.cache_n, c.prompt_n) for c in done)
    verdict = "meets" if ratio <= 1.2 else "does NOT meet"
    # The shortest first request of a thread: its baseline and a one-line message.
    opening = min(c.cache_n + c.prompt_n for c in done if c.kind == "main" and not c.held)
    threads = len({c.session for c in done if c.kind == "main"})
    return f"""## An owner's day on the shared main slot (`bench/day_bench.py`)

This run: `--threads {args.threads} --turns {args.turns} --job-turns {args.job_turns} --seed
{args.seed}`, {facts["steps"]} turns, loopd restarted before turn {facts["restart_at"]}.

Measured {today()} on {machine_line()}; {load_note()} at the end. The whole local stack (tiny
Qwen 2.5 Coder 0.5B, 2 slots of {SLOT_CONTEXT:,} tokens, greedy, {MAX_TOKENS} tokens per
completion) serves the threads on the main slot in a seeded random arrival order, every third
turn of a thread a tool call (`fs.read` through `call_tool`, in the sandbox), one thread in
three opening with a pasted note, and a job on the background slot. *new*: what each request
adds to its session (a session's first request: its whole prompt), the physical limit;
*processed*: the server's `prompt_n`; *re-read*: what the session held that was not found.

| slot | sessions | completions | new | processed | re-read | processed / new |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The day {verdict} the goal of processed <= 1.2x new ({ratio:.2f}x); {facts["cache_losses"]}
cache losses logged; {facts["seconds"]:.0f} s of turns here. Projected to the owner's host
(prompt processing {DEPTH_0:,.0f} tokens/s at depth 0, {DEPTH_32K:,.0f} at 32k): **{host:.0f} s**
of prompt processing for the day, against **{before:.0f} s** had every return to a thread re-read it
whole. Re-read
counts what the session held, its generated tokens included, that its next request did not find
cached: the last token (always evaluated again) and any generated text the template renders
otherwise when it is replayed. Each thread's
first request is all new here, its baseline included: the session marker keeps threads from
sharing the baseline (docs/decisions.md, "Sessions switch on a slot through the RAM cache"), so
the day reads it {threads} times, where the physical limit of a server shared by every thread
would read it once; the shortest first request (baseline and a one-line message) was
{opening:,} tokens, about {opening / DEPTH_0:.1f} s on the owner's host per new thread.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--job-turns", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--restart-at", type=int, default=0, help="0: halfway through the day")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    done, facts = run(args)
    text = render(done, facts, args)
    print(text if args.no_write else write_section("day", text))


if __name__ == "__main__":
    main()
