"""The peers benchmark's section of docs/performance.md, from one run's recorded requests.

Every sentence is computed from the run: the verdicts on the two goals (Boxmaker processes at
least ``GOAL_RATIO`` times fewer prompt tokens than each peer over the conversation; it re-reads
none of its earlier prompt in any turn) say "met" or "NOT met" from the figures, and a harness
that could not be installed or driven says so with its error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report import load_note, machine_line, today
from request_diff import Request, Verdict, host_seconds, verdicts

GOAL_RATIO = 10.0
CHAT = "/chat/completions"


@dataclass(frozen=True)
class PeersRun:
    harnesses: list[Any]  # peers_bench.Harness
    exchanges: list[Any]  # recording_proxy.Exchange
    steps: list[Any]  # peers_bench.Step
    model: str
    slots: int
    slot_context: int
    max_tokens: int
    seconds: float
    notes: str  # the notes' directory, shown as "notes" (a temp path of the run)
    cache_ram: str  # the preset's --cache-ram, as served
    minutes: float  # the run's time limit: no turn started after it
    measured: str  # the run's date, machine and load at its end, as the section says them


@dataclass(frozen=True)
class Row:
    harness: str
    session: int
    turn: int
    request: Request
    verdict: Verdict


def rows(exchanges: list[Any]) -> list[Row]:
    """The completions with timings, each compared with its session's previous one."""
    kept = []
    for exchange in exchanges:
        if not _is_completion(exchange) or not exchange.timings \
                or not isinstance(exchange.body, dict):
            continue
        harness, session, turn = exchange.label.split("|")
        kept.append((harness, int(session), int(turn), Request(
            session=f"{harness}|{session}", body=exchange.body,
            cache_n=int(exchange.timings.get("cache_n", 0)),
            prompt_n=int(exchange.timings.get("prompt_n", 0)))))
    judged = verdicts([request for *_, request in kept])
    return [Row(h, s, t, r, v) for (h, s, t, r), v in zip(kept, judged, strict=True)]


def _extends(verdict: Verdict) -> str:
    if verdict.extends is None:
        return "first of its session"
    return "yes" if verdict.extends else "no"


def _cell(text: str) -> str:
    return _private(text).replace("|", "\\|").replace("\n", "\\n")


def _private(text: str) -> str:
    """Without this machine's home directory (an error names paths under it)."""
    return text.replace(str(Path.home()), "~")


@dataclass(frozen=True)
class Totals:
    processed: int
    first: int  # processed tokens of the conversation's first request
    first_per_session: list[int]
    reread: int
    max_turn_reread: int
    host: float
    host_first: float
    requests: int
    extending: int  # requests that strictly extend the previous one of their session
    later: int  # requests that have a previous one in their session
    tool_results: int  # tool results the harness sent back, over its sessions


def totals(mine: list[Row]) -> Totals:
    firsts = [r for r in mine if r.verdict.extends is None]
    per_turn: dict[int, int] = {}
    for row in mine:
        per_turn[row.turn] = per_turn.get(row.turn, 0) + row.verdict.reread
    return Totals(
        processed=sum(r.request.prompt_n for r in mine),
        first=firsts[0].request.prompt_n if firsts else 0,
        first_per_session=[r.request.prompt_n for r in firsts],
        reread=sum(r.verdict.reread for r in mine),
        max_turn_reread=max(per_turn.values(), default=0),
        host=sum(host_seconds(r.request.cache_n, r.request.prompt_n) for r in mine),
        host_first=host_seconds(firsts[0].request.cache_n, firsts[0].request.prompt_n)
        if firsts else 0.0,
        requests=len(mine),
        extending=sum(1 for r in mine if r.verdict.extends),
        later=sum(1 for r in mine if r.verdict.extends is not None),
        tool_results=sum(max(_tool_messages(r.request.body) for r in mine if r.session == s)
                         for s in {r.session for r in mine}),
    )


def _is_completion(exchange: Any) -> bool:
    return bool(exchange.method == "POST" and exchange.path.endswith(CHAT))


def _completions(exchanges: list[Any], key: str) -> list[Any]:
    return [e for e in exchanges if _is_completion(e) and e.label.split("|")[0] == key]


def _untimed(exchanges: list[Any], key: str) -> list[int]:
    """Where a harness's completions without the server's timings are in the recording."""
    return [i for i, e in enumerate(exchanges)
            if _is_completion(e) and e.label.split("|")[0] == key and not e.timings]


def _left_in_cache(exchanges: list[Any], at: int) -> int:
    """What the untimed completion at ``at`` left in its slot's cache: how many more tokens the
    next timed completion of its harness and session found cached than the timed ones before
    it had left there (the server processed its prompt, but says so only in timings)."""
    session = exchanges[at].label.split("|")[:2]
    timed = [(i, e.timings) for i, e in enumerate(exchanges)
             if _is_completion(e) and e.timings and e.label.split("|")[:2] == session]
    before = [t for i, t in timed if i < at]
    after = [t for i, t in timed if i > at]
    if not after:
        return 0
    left = int(before[-1].get("cache_n", 0)) + int(before[-1].get("prompt_n", 0)) if before else 0
    return max(0, int(after[0].get("cache_n", 0)) - left)


def _uncounted(outcome: PeersRun, key: str) -> tuple[int, int]:
    """A harness's completions without timings, and the tokens they left in the cache."""
    untimed = _untimed(outcome.exchanges, key)
    return len(untimed), sum(_left_in_cache(outcome.exchanges, at) for at in untimed)


def _abandoned_sentences(outcome: PeersRun) -> list[str]:
    """A harness's completions that it left before their end (counted: the proxy read them to
    the end), and any that came back without the server's timings (not counted)."""
    said = []
    for harness in outcome.harnesses:
        mine = _completions(outcome.exchanges, harness.key)
        left = [e for e in mine if e.client_left and e.timings]
        if left:
            when = ", ".join(f"{e.seconds:.0f} s" for e in left)
            one = len(left) == 1
            said.append(f"{harness.name} closed its connection before the end of {len(left)} "
                        f"answer{'' if one else 's'} (after {when}); the proxy read "
                        f"{'it to its' if one else 'them to their'} end, so "
                        f"{'its' if one else 'their'} tokens are counted.")
        untimed = _untimed(outcome.exchanges, harness.key)
        if untimed:
            what = "; ".join(
                f"status {outcome.exchanges[at].status} after {outcome.exchanges[at].seconds:.0f} "
                f"s, ending {_cell(outcome.exchanges[at].tail[-120:])!r}" for at in untimed)
            many = len(untimed) > 1
            said.append(f"{harness.name}: {len(untimed)} completion{'s' if many else ''} came "
                        f"back without the server's timings and {'are' if many else 'is'} not "
                        f"counted ({what}); the next completions found "
                        f"{sum(_left_in_cache(outcome.exchanges, at) for at in untimed):,} more "
                        "tokens in the cache than the counted ones had left there.")
    return said


def _tool_messages(body: dict[str, Any]) -> int:
    messages = body.get("messages")
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool") \
        if isinstance(messages, list) else 0


def _request_table(all_rows: list[Row], names: dict[str, str], notes: str) -> str:
    lines = ["| harness | session | turn | processed | cached | total | extends previous | "
             "what changed |", "|---|---|---|---|---|---|---|---|"]
    for row in all_rows:
        r = row.request
        lines.append(
            f"| {names.get(row.harness, row.harness)} | {row.session} | {row.turn} | "
            f"{r.prompt_n:,} | {r.cache_n:,} | {r.prompt_n + r.cache_n:,} | "
            f"{_extends(row.verdict)} | "
            f"{_cell('; '.join(row.verdict.changes).replace(notes, 'notes'))} |")
    return "\n".join(lines)


def _summary_table(outcome: PeersRun, by: dict[str, Totals]) -> str:
    lines = ["| harness | run as | requests | tool results | extend their previous | "
             "tokens processed | "
             "first request | first request per session | re-read | wall time per turn (s) | "
             "owner's host: prompt processing | its first request |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for harness in outcome.harnesses:
        if harness.failure:
            lines.append(f"| {harness.name} | not run: {_cell(harness.failure)} |"
                         + " |" * 10)
            continue
        t = by[harness.key]
        seconds = ", ".join(f"{turn.seconds:.0f}" + ("" if turn.ok else " (failed)")
                            for turn in harness.turns)
        lines.append(
            f"| {harness.name} | {_cell(harness.setup)} | {t.requests} | {t.tool_results} | "
            f"{t.extending} of {t.later} | {t.processed:,} | {t.first:,} | "
            f"{', '.join(f'{n:,}' for n in t.first_per_session)} | {t.reread:,} | {seconds} | "
            f"{t.host:.1f} s | {t.host_first:.1f} s |")
    return "\n".join(lines)


def verdict_sentences(outcome: PeersRun, by: dict[str, Totals], all_rows: list[Row]
                      ) -> list[str]:
    """The goals' verdicts, each from the figures, and where each harness's tokens went."""
    said = []
    box = by.get("boxmaker")
    ran = [h for h in outcome.harnesses
           if not h.failure and h.key != "boxmaker" and by[h.key].requests]
    for harness in outcome.harnesses:
        if not harness.failure and harness.key != "boxmaker" and not by[harness.key].requests:
            said.append(f"No request of {harness.name} was answered in this run.")
    for harness in outcome.harnesses:
        if harness.failure:
            said.append(f"{harness.name} could not be run here: {_cell(harness.failure)}.")
        failed = [n for n, turn in enumerate(harness.turns, 1) if not turn.ok]
        if failed:
            details = "; ".join(f"turn {n}: {harness.turns[n - 1].detail}" for n in failed)
            said.append(f"{harness.name} failed {len(failed)} of {len(harness.turns)} turns "
                        f"({_cell(details)}).")
    if box is None or not ran:
        said.append("The ≥10x goal was not measured in this run: it needs answered requests "
                    "of Boxmaker and of at least one peer.")
    for harness in ran if box is not None else []:
        peer = by[harness.key]
        ratio = peer.processed / box.processed if box.processed else float("inf")
        met = "met" if ratio >= GOAL_RATIO else "NOT met"
        (box_n, box_cached), (peer_n, peer_cached) = (_uncounted(outcome, "boxmaker"),
                                                      _uncounted(outcome, harness.key))
        caveat = ""
        if box_n or peer_n:
            with_cached = (peer.processed + peer_cached) / (box.processed + box_cached) \
                if box.processed + box_cached else float("inf")
            caveat = (f" ({box_n} of Boxmaker's and {peer_n} of its completions not counted, "
                      f"below; with the tokens they left in the cache, {with_cached:.1f}x)")
        said.append(
            f"{harness.name} processed {peer.processed:,} prompt tokens over the turns run, "
            f"Boxmaker {box.processed:,}: {ratio:.1f}x as many, so the ≥{GOAL_RATIO:.0f}x goal "
            f"is {met} against it{caveat}.")
    for harness in [h for h in outcome.harnesses if not h.failure and by[h.key].requests]:
        t = by[harness.key]
        firsts = sum(t.first_per_session)
        share = 100 * firsts / t.processed if t.processed else 0.0
        said.append(
            f"{harness.name}: {firsts:,} of its {t.processed:,} processed tokens ({share:.0f}%) "
            f"were the first requests of its sessions, {t.reread:,} re-read earlier prompts; "
            f"{t.extending} of its {t.later} later requests strictly extended the previous one.")
    said += _abandoned_sentences(outcome)
    said.append(_reads_sentence(outcome, by))
    if forced := _forced_sentence(all_rows):
        said.append(forced)
    if box is None:
        return said
    done = max(len(h.turns) for h in outcome.harnesses)
    restart = next((n for n, s in enumerate(outcome.steps, 1) if s.restart_before), None)
    sessions = len({s.session for s in outcome.steps[:done]})
    across = (f"across the restart before turn {restart}" if restart and restart <= done
              else "with no restart reached")
    zero = box.max_turn_reread == 0
    for row in [r for r in all_rows if r.harness == "boxmaker" and r.verdict.reread]:
        said.append(f"Boxmaker re-read {row.verdict.reread:,} tokens in turn {row.turn}: "
                    f"{_cell('; '.join(row.verdict.changes).replace(outcome.notes, 'notes'))}.")
    said.append(
        f"Boxmaker re-read {box.reread} tokens of its earlier prompts in all "
        f"(at most {box.max_turn_reread} in one turn) in {done} turns, {across} and in "
        f"{sessions} session{'s' if sessions > 1 else ''}: the \"0 re-read tokens in "
        f"every turn\" goal is {'met' if zero else 'NOT met'}.")
    return said


def _reads_sentence(outcome: PeersRun, by: dict[str, Totals]) -> str:
    """How many tool results each harness sent back, beside the file-read turns run: with none,
    its answers to those turns did not come from the files."""
    done = max((len(h.turns) for h in outcome.harnesses), default=0)
    reads = sum(1 for step in outcome.steps[:done] if step.read)
    counted = [(h.name, by[h.key].tool_results) for h in outcome.harnesses
               if not h.failure and by[h.key].requests]
    listed = "; ".join(f"{name}: {results}" for name, results in counted)
    none = [name for name, results in counted if results == 0]
    said = f"Of the {reads} file-read turns run, tool results sent back: {listed}."
    if none:
        whose = "their" if len(none) > 1 else "its"
        said += (f" {', '.join(none)}: no file read in this run, so {whose}"
                 " answers to those turns did not come from the notes, and the tokens compared"
                 " are of prompts and answers without them.")
    return said


def _forced_sentence(all_rows: list[Row]) -> str:
    """Of Boxmaker's completions asked for a tool call (``tool_choice`` ``required``), how many
    the server answered with one: a call is answered by a later request of the same turn that
    carries more tool results; text ends the turn's tool round there."""
    mine = [r for r in all_rows if r.harness == "boxmaker"]
    asked = called = 0
    for index, row in enumerate(mine):
        if row.request.body.get("tool_choice") != "required":
            continue
        asked += 1
        results = _tool_messages(row.request.body)
        called += any(_tool_messages(later.request.body) > results for later in mine[index + 1:]
                      if (later.session, later.turn) == (row.session, row.turn))
    if not asked:
        return ""
    said = (f"Boxmaker asked for a tool call (`required`) in {asked} completion"
            f"{'s' if asked > 1 else ''}; the server answered {called} with a call")
    if called == asked:
        return said + "."
    return said + f" and {asked - called} with text (docs/decisions/benchmarks.md)."


def _restart_sentence(box: Totals | None, restarts: int) -> str:
    if box is None or not restarts:
        return ""
    return (f"Boxmaker's restart ran loopd's start-up self-test: {restarts} requests on its "
            "background slot, not counted above.")


def measured_now() -> str:
    """The date, machine and load as a run ends, kept with its recording, so a section written
    again from that recording (``--again``) says the run's, not the moment of writing."""
    return f"{today()} on {machine_line()}; {load_note()}"


def render(outcome: PeersRun) -> str:
    all_rows = rows(outcome.exchanges)
    names = {h.key: h.name for h in outcome.harnesses}
    by = {h.key: totals([r for r in all_rows if r.harness == h.key])
          for h in outcome.harnesses if not h.failure}
    run = max((len(h.turns) for h in outcome.harnesses), default=0)
    limit = ("" if run == len(outcome.steps) else
             f"\n\nThe run stopped at its time limit of {outcome.minutes:g} min after turn {run} "
             f"of {len(outcome.steps)}: turns {run + 1} to {len(outcome.steps)} were not run.")
    steps = "\n".join(
        f"{n}. session {s.session}{' (after a restart)' if s.restart_before else ''}: "
        f"\"{s.text.replace(outcome.notes, 'notes')}\"" for n, s in enumerate(outcome.steps, 1))
    restarts = sum(1 for r in all_rows if r.harness == "boxmaker-restart")
    box = by.get("boxmaker")
    projections = "; ".join(
        f"{names[k]} {t.host:.1f} s in all, {t.host_first:.1f} s for its first request"
        for k, t in by.items() if t.requests)
    return f"""## Boxmaker beside the harnesses people run (`bench/peers_bench.py`)

Measured {outcome.measured} at the end; the whole run took
{outcome.seconds / 60:.1f} min. One llama-server router (`{outcome.model}` preset, {outcome.slots}
slots of {outcome.slot_context:,} tokens, {outcome.max_tokens} tokens per answer for every
harness, host-RAM prompt cache `--cache-ram {outcome.cache_ram}`: loopd's self-test refuses 0, so
*cached* may include it) served the conversation turn by turn, each turn through every harness
in the order of the table below, every request through one recording proxy. The
conversation, the same for each (`notes/` holds notes of about 900 bytes):

{steps}{limit}

Each peer turn is one run of the peer's command line, so every peer turn starts it afresh;
Boxmaker's loopd was restarted before the turn marked. Boxmaker's file-read turns ask its
first completion for a tool call (`tool_choice` `required`, then `none`); the peers decide
alone. *processed*: prompt tokens the server evaluated; *cached*: tokens its slot cache
served; *re-read*: tokens of the session's previous request the cache did not cover. The
owner's host projection takes each request's processed tokens at the seeds' rates, 1,170
tokens/s at depth 0 falling linearly to 669 at 32k.

{_summary_table(outcome, by)}

{chr(10).join(verdict_sentences(outcome, by, all_rows))}
{_restart_sentence(box, restarts)}
On the owner's host: {projections}.

Every request, in order:

{_request_table([r for r in all_rows if r.harness != "boxmaker-restart"], names, outcome.notes)}
"""
