"""The owner's day (day_bench.py's) through Hermes Agent and OpenClaw beside Boxmaker, in one run.

    uv run python bench/day_bench.py --peers [--threads 20] [--turns 6] [--job-turns 4]
                                             [--seed 1] [--harnesses boxmaker,hermes,openclaw]
                                             [--trimmed-peers] [--minutes 600] [--no-write]

Not a test. One llama-server router (the default model, ``coder``: the 1.5B, whose tool calls
work) serves every harness through one recording proxy (peers_bench.py's set-up): the day's
turns in day_bench's seeded arrival order, each turn through every harness before the next (so
their figures grow together and a time limit stops them at the same turn). Each thread, and the
job, is one session of each harness: Boxmaker's over loop.sock (loopd restarted before the day's
middle turn, as in day_bench), a peer's one run of its command line resuming its session
(peers_bench's drivers). A note to read is asked for in each harness's terms: Boxmaker's names
its ``call_tool``, a peer is asked to read the file. Per harness, from the recorded requests and
the server's ``timings``: requests, processed (``prompt_n``), new (what a request adds to its
session), the threads' first requests, returns to a thread (a turn's first request in a session
that had earlier turns: processed, re-read, whether it strictly extends the session's previous
request) and the requests within a turn, and the tool calls completed (tool results sent back;
those holding the note's text). Writes its section of docs/performance.md (bench:day-peers).
"""

from __future__ import annotations

import argparse
import json
import pickle
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from cache_bench import system_text, write_notes  # noqa: E402
from day_bench import Step, day  # noqa: E402
from peer_harnesses import Hermes, OpenClaw, PeerTurn  # noqa: E402
from peers_bench import (  # noqa: E402
    CACHE,
    SLOT_CONTEXT,
    SLOTS,
    TURN_TIMEOUT,
    Harness,
    prepare_peer,
    recorded_stack,
)
from recording_proxy import Exchange  # noqa: E402
from report import load_note, machine_line, today, write_section  # noqa: E402
from request_diff import extends  # noqa: E402
from rig import RigError, StackSettings  # noqa: E402

MODEL = "coder"  # `bxctl up`'s default (docs/decisions/small-local-models.md)
MAX_TOKENS = 256  # every harness: words, then a fenced call (at 96 no harness completed one)
HARNESSES = ("boxmaker", "hermes", "openclaw")
RESTART = "(restart)"  # the session label of what loopd sends while it restarts
NOTE_TEXT = "needs attention"  # every line of a note has it: a tool result holding it read one
GOAL_RATIO = 10.0
LAST_RUN = CACHE / "day-peers-last-run.pickle"


def plain_read(note: Path, intro: str) -> str:
    """A request to read a note in plain words, the same for every harness. The 1.5B called no
    tool, in any harness, when asked to use one by name (day_bench's wording for Boxmaker, or
    "Read the file ..."), and called one in each when asked this (a probe of the recorded
    requests); the intro is left out."""
    return f"What is in my note {note}?"


@dataclass(frozen=True)
class Sent:
    """One recorded completion with the server's timings."""

    harness: str
    session: str
    step: int  # the day's turn it belongs to
    body: dict[str, Any]
    cache_n: int
    prompt_n: int
    predicted_n: int


def label(harness: str, session: str, step: int) -> str:
    return f"{harness}|{session}|{step}"


def recorded(exchanges: Sequence[Exchange]) -> list[Sent]:
    """The chat completions the server answered with timings, in the order they arrived."""
    sent = []
    for e in exchanges:
        if e.method != "POST" or not e.path.endswith("/chat/completions") or not e.timings \
                or not isinstance(e.body, dict) or e.label.count("|") != 2:
            continue
        harness, session, step = e.label.split("|")
        sent.append(Sent(harness, session, int(step), e.body, int(e.timings.get("cache_n", 0)),
                         int(e.timings.get("prompt_n", 0)), int(e.timings.get("predicted_n", 0))))
    return sent


@dataclass
class Figures:
    requests: int = 0
    processed: int = 0
    new: int = 0
    threads: int = 0  # sessions started (the threads and the job)
    first: int = 0  # processed by the sessions' first requests
    returns: int = 0  # turns that went back to a session with earlier turns
    returns_processed: int = 0
    returns_reread: int = 0  # of the session's previous prompt, what a return found uncached
    rewrites: int = 0  # returns whose request does not strictly extend the session's previous
    within: int = 0  # requests after a turn's first (tool results, retries)
    within_processed: int = 0
    within_reread: int = 0
    restart_processed: int = 0  # what loopd sent while it restarted (Boxmaker only)
    tool_results: int = 0  # distinct tool results sent back, over the sessions
    notes_read: int = 0  # of those, the ones holding a note's text
    first_each: list[int] = field(default_factory=list)


def figures(sent: Sequence[Sent]) -> dict[str, Figures]:
    """Per harness, the day's accounting of its recorded completions (pure)."""
    result: dict[str, Figures] = {}
    previous: dict[tuple[str, str], Sent] = {}
    results: dict[tuple[str, str], set[str]] = {}
    for s in sent:
        f = result.setdefault(s.harness, Figures())
        f.requests += 1
        f.processed += s.prompt_n
        if s.session == RESTART:
            f.restart_processed += s.prompt_n
            continue
        key = (s.harness, s.session)
        before = previous.get(key)
        total = s.cache_n + s.prompt_n
        held = before.cache_n + before.prompt_n + before.predicted_n if before else 0
        f.new += max(0, total - held)
        if before is None:
            f.threads += 1
            f.first += s.prompt_n
            f.first_each.append(s.prompt_n)
        else:
            reread = max(0, before.cache_n + before.prompt_n - s.cache_n)
            if s.step != before.step:
                f.returns += 1
                f.returns_processed += s.prompt_n
                f.returns_reread += reread
                f.rewrites += not extends(before.body, s.body)
            else:
                f.within += 1
                f.within_processed += s.prompt_n
                f.within_reread += reread
        previous[key] = s
        messages = s.body.get("messages")
        for m in messages if isinstance(messages, list) else []:
            if isinstance(m, dict) and m.get("role") == "tool":
                results.setdefault(key, set()).add(json.dumps(m, sort_keys=True))
    for (harness, _), tools in results.items():
        result[harness].tool_results += len(tools)
        result[harness].notes_read += sum(1 for t in tools if NOTE_TEXT in t)
    return result


@dataclass
class DayRun:
    args: dict[str, Any]
    steps: int
    done: int  # turns run through every harness before the time limit
    restart_at: int
    harnesses: list[Harness]
    exchanges: list[Exchange]
    seconds: float


def run(args: argparse.Namespace, chosen: list[str]) -> DayRun:
    directory = Path(tempfile.mkdtemp(prefix="bx-day-peers-"))
    notes = write_notes(directory / "notes")
    # The same words for every harness, and no tool_choice for Boxmaker either: each model
    # decides to use its tools itself (as in the first-chat test).
    steps = [replace(s, tool_choice=()) for s in day(args.threads, args.turns, args.job_turns,
                                                     notes, args.seed, read=plain_read)]
    restart_at = args.restart_at or len(steps) // 2
    harnesses = {"boxmaker": Harness("boxmaker", "Boxmaker",
                                     "the local stack (`bxctl up`'s code), loop.sock"),
                 "hermes": Harness("hermes", f"{Hermes.name} {Hermes.version}"),
                 "openclaw": Harness("openclaw", f"{OpenClaw.name} {OpenClaw.version}")}
    settings = StackSettings(model=MODEL, max_tokens=MAX_TOKENS, per_slot_context=SLOT_CONTEXT,
                             slot_count=SLOTS, temperature=0.0,
                             system=system_text(secrets.token_hex(6)))
    started = time.perf_counter()
    done = 0
    try:
        with recorded_stack(directory, notes[0].parent, settings) as (stack, recorder, port):
            peers = {key: peer for key, peer in (
                ("hermes", Hermes(CACHE, trimmed=args.trimmed_peers)),
                ("openclaw", OpenClaw(CACHE, trimmed=args.trimmed_peers)))
                if key in chosen and prepare_peer(peer, key, directory, port, harnesses[key],
                                                  model=MODEL, max_tokens=MAX_TOKENS)}
            numbers: dict[str, int] = {}  # a peer's session number per day session
            seen: set[str] = set()
            for number, step in enumerate(steps, 1):
                if time.perf_counter() - started > args.minutes * 60:
                    print(f"time limit: turns {number}.. not run", file=sys.stderr)
                    break
                for key in (k for k in HARNESSES if k in chosen):
                    if key == "boxmaker":
                        if number == restart_at:
                            recorder.label = label(key, RESTART, number)
                            stack.restart("loopd")
                        recorder.label = label(key, step.session, number)
                        turn = box_turn(stack, step, resume=step.session in seen)
                    elif key in peers:
                        recorder.label = label(key, step.session, number)
                        session = numbers.setdefault(step.session, len(numbers) + 1)
                        turn = peers[key].turn(session, step.text, notes[0].parent, TURN_TIMEOUT)
                    else:
                        continue
                    harnesses[key].turns.append(turn)
                    print(f"{number}/{len(steps)} {key} {step.session}: {turn.seconds:.1f} s"
                          f"{'' if turn.ok else ' FAILED ' + turn.detail[:300]}", file=sys.stderr)
                seen.add(step.session)
                done = number
            exchanges = list(recorder.exchanges)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return DayRun(args=vars(args), steps=len(steps), done=done, restart_at=restart_at,
                  harnesses=[harnesses[k] for k in HARNESSES if k in chosen],
                  exchanges=exchanges, seconds=time.perf_counter() - started)


def box_turn(stack: Any, step: Step, *, resume: bool) -> PeerTurn:
    try:
        timed = stack.turn(step.session, step.text, resume=resume, tool_choice=step.tool_choice,
                           kind=step.kind)
    except RigError as exc:
        return PeerTurn(0.0, False, str(exc))
    return PeerTurn(timed.seconds, True, "")


HEAD = ("| harness | how run | turns failed | tool results (holding the note) | requests | "
        "processed | new | processed / new | first requests: sessions, processed | returns: "
        "count, processed, re-read, not extending | within turns: requests, processed, re-read "
        "| processed / Boxmaker's |\n" + "|---" * 12 + "|\n")


def _row(h: Harness, f: Figures, box: Figures | None) -> str:
    ratio = f"{f.processed / box.processed:.1f}x" if box and box.processed else "-"
    restart = f" (+{f.restart_processed:,} at loopd's restart)" if f.restart_processed else ""
    return (f"| {h.name} | {h.setup or h.failure[:120]} | "
            f"{sum(1 for t in h.turns if not t.ok)} of {len(h.turns)} | "
            f"{f.tool_results} ({f.notes_read}) | {f.requests} | {f.processed:,}{restart} | "
            f"{f.new:,} | {f.processed / max(f.new, 1):.2f}x | {f.threads}, {f.first:,} | "
            f"{f.returns}, {f.returns_processed:,}, {f.returns_reread:,}, {f.rewrites} | "
            f"{f.within}, {f.within_processed:,}, {f.within_reread:,} | {ratio} |")


def reason(f: Figures) -> str:
    """Where a harness's processed tokens went, largest part first."""
    parts = sorted([(f.first, "the sessions' first requests"),
                    (f.returns_processed, f"returns to a thread ({f.rewrites} of {f.returns} "
                                          "not extending the session's previous request)"),
                    (f.within_processed, f"requests within a turn ({f.within})")], reverse=True)
    total = max(f.processed, 1)
    return ", ".join(f"{tokens / total:.0%} {what}" for tokens, what in parts)


def verdicts(outcome: DayRun, by: dict[str, Figures]) -> list[str]:
    box = by.get("boxmaker")
    if box is None or not box.processed:
        return ["Boxmaker has no recorded completion in this run: no ratio."]
    said = [f"- Boxmaker processed {box.processed:,} tokens: {reason(box)}."]
    for h in outcome.harnesses:
        if h.key == "boxmaker":
            continue
        f = by.get(h.key)
        if f is None or not f.processed:
            said.append(f"- {h.name}: no recorded completion"
                        f"{' (' + h.failure[:200] + ')' if h.failure else ''}: no ratio.")
            continue
        ratio = f.processed / box.processed
        said.append(
            f"- {h.name} processed {f.processed:,} tokens, {ratio:.1f}x Boxmaker's: the goal "
            f"(>= {GOAL_RATIO:.0f}x) is {'met' if ratio >= GOAL_RATIO else 'NOT met'}. Its "
            f"tokens went to {reason(f)}; its first request per session processed "
            f"{', '.join(f'{n:,}' for n in f.first_each)}. It completed {f.tool_results} tool "
            f"calls ({f.notes_read} returning a note's text), Boxmaker {box.tool_results} "
            f"({box.notes_read}).")
    done = {h.key: by[h.key].tool_results for h in outcome.harnesses if h.key in by}
    if not any(done.values()):
        said.append("- No harness completed a tool call in this run: the figures compare "
                    "conversations, not yet the same work with tools.")
    elif len(set(done.values())) > 1:
        said.append("- The harnesses completed different numbers of tool calls ("
                    + ", ".join(f"{k} {v}" for k, v in done.items())
                    + "): the work differs by that much.")
    return said


def render(outcome: DayRun) -> str:
    by = figures(recorded(outcome.exchanges))
    box = by.get("boxmaker")
    table = "\n".join(_row(h, by.get(h.key, Figures()), box) for h in outcome.harnesses)
    a = outcome.args
    full = a["threads"] == 20 and a["turns"] == 6 and outcome.done == outcome.steps
    scope = ("the full day" if full else
             f"a SMALLER day than the 20-thread, 6-turn one (turns {outcome.done} of "
             f"{outcome.steps} run): the full day is `scripts/bench day --peers` with its "
             "defaults, longer than this loaded 2-core machine allowed")
    tools = ("The peers ran with their file tools only (`--trimmed-peers`): a smaller prompt than "
             "their defaults, so each ratio below is lower than with their default tools."
             if a["trimmed_peers"] else "The peers ran with their default tools.")
    return f"""## The owner's day through Hermes Agent and OpenClaw (`scripts/bench day --peers`)

This run: `--threads {a["threads"]} --turns {a["turns"]} --job-turns {a["job_turns"]} --seed
{a["seed"]}{" --trimmed-peers" if a["trimmed_peers"] else ""}`, {scope}; loopd restarted before
turn {outcome.restart_at}; {outcome.seconds / 60:.0f} min for all harnesses. Measured {today()} on
{machine_line()}; {load_note()} at the end.

One llama-server router (model `{MODEL}`, the 1.5B that `bxctl up` serves by default, {SLOTS}
slots of {SLOT_CONTEXT:,} tokens, serving/presets.ini's flags, {MAX_TOKENS} tokens per completion)
serves every harness through one recording proxy. The day's turns come in day_bench's seeded
arrival order, each turn through every harness before the next; each thread, and the job, is one
session of each harness (a peer's command line resuming its session on a return). A note to read
is asked for in the same plain words in every harness (no `tool_choice`). *processed*: the
server's `prompt_n`; *new*: what a request
adds to its session (its prompt beyond what the session's previous completion left); a *return*
is a turn's first request in a session with earlier turns; *re-read*: of the session's previous
prompt, what the request did not find cached; *tool results*: distinct tool messages the harness
sent back. {tools}

{HEAD}{table}

{chr(10).join(verdicts(outcome, by))}
"""


def main(args: argparse.Namespace) -> None:
    chosen = [h for h in args.harnesses.split(",") if h]
    unknown = sorted(set(chosen) - set(HARNESSES))
    if unknown:
        raise SystemExit(f"--harnesses: unknown {unknown}; known: {', '.join(HARNESSES)}")
    outcome = run(args, chosen)
    LAST_RUN.write_bytes(pickle.dumps(outcome))  # to write the section again if need be
    text = render(outcome)
    print(text if args.no_write else write_section("day-peers", text))
