"""Benchmark: what one compaction costs in prompt tokens on the real server, and whether the
cache holds again after it.

    uv run python bench/compaction_bench.py [--turns 9] [--slot-context 2560] [--no-write]

Not a test. The whole local stack (``bxctl up``'s code, started as ``bench/cache_bench.py``
starts it, with its presets, notes and re-read count) with the tiny Qwen. Its slots are only
``--slot-context`` tokens, so loopd's compaction trigger (``[loop] compact_at``: 75% of the slot)
is reached after a few turns. Each turn the owner pastes one of the cache bench's 900-byte notes
and asks for one sentence (``tool_choice`` none, greedy sampling, 48 tokens), so the slot gains
about 350 tokens a turn without any tool run. When a turn ends at or above the trigger, loopd
compacts before the next turn: a summary request (the whole epoch plus the compaction
instruction, at most SUMMARY_TOKENS tokens) closes epoch 0, and the next turn's own request is
the first of epoch 1 (the new baseline, the summary, the new text).

Figures come from the server's own timings, as loopd logged them in every epoch's Usage records:
``cache_n`` and ``prompt_n`` per completion. Re-read is counted as in cache_bench.py. Writes its
section of docs/performance.md (bench:compaction).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bxcore.records import Assistant, Usage, User  # noqa: E402
from cache_bench import (  # noqa: E402
    MODEL,
    SAMPLING,
    SLOTS,
    TOPICS,
    grants,
    presets,
    rereads,
    system_text,
    write_notes,
)
from loopd.baseline import Baseline  # noqa: E402
from loopd.epochs import COMPACT_INSTRUCTION  # noqa: E402
from loopd.log import Record  # noqa: E402
from loopd.store import SessionStore, baseline_path  # noqa: E402
from report import load_note, machine_line, today, write_section  # noqa: E402
from rig import StackSettings, running_stack, serving_dir  # noqa: E402
from support.llama import llama_paths  # noqa: E402

SESSION = "compaction-bench"
MAX_TOKENS = 48
SUMMARY_TOKENS = 128  # the summary must fit in the slot beside the full epoch
COMPACT_AT = 0.75  # [loop] compact_at's default, which the stack's config keeps


@dataclass(frozen=True)
class Completion:
    turn: int
    epoch: int
    summary: bool  # the compaction's summary request, run before the turn's own request
    cache_n: int
    prompt_n: int
    predicted_n: int


def completions(epochs: Sequence[Sequence[Record]]) -> list[Completion]:
    """Every completion of the session in order. A compaction's summary belongs to the turn
    that found the slot full: it runs before that turn's own request."""
    result: list[Completion] = []
    turn, summary = 0, False
    for epoch, records in enumerate(epochs):
        for record in records:
            if isinstance(record, User):
                summary = record.content == COMPACT_INSTRUCTION
                turn += 0 if summary else 1
            elif isinstance(record, Usage):
                result.append(Completion(turn + summary, epoch, summary, record.cache_n,
                                         record.prompt_n, record.predicted_n))
    return result


def turn_text(note: Path, topic: str) -> str:
    return (f"Here is my note on the {topic}:\n\n{note.read_text()}\n"
            "In one sentence: what does it ask me to do?")


def run(turns: int, slot_context: int) -> tuple[list[Completion], list[float], dict[str, Any]]:
    """Drive one session for ``turns`` turns: its completions, each turn's wall time, and facts
    about its first compaction (the summary's length, whether both epochs open alike)."""
    directory = Path(tempfile.mkdtemp(prefix="bx-compaction-"))
    try:
        notes = write_notes(directory / "notes")
        settings = StackSettings(
            model=MODEL, max_tokens=MAX_TOKENS, per_slot_context=slot_context, slot_count=SLOTS,
            temperature=SAMPLING["temperature"], system=system_text(secrets.token_hex(6)),
            summary_tokens=SUMMARY_TOKENS,
        )
        binary, models = llama_paths()
        seconds = []
        with running_stack(
            directory, llama_server=binary, models=models,
            serving=serving_dir(directory, presets(slot_context)),
            grants=grants(directory / "grants", directory / "notes"), settings=settings,
        ) as stack:
            for number in range(1, turns + 1):
                index = (number - 1) % len(notes)
                timed = stack.turn(SESSION, turn_text(notes[index], TOPICS[index]),
                                   resume=number > 1, tool_choice=["none"])
                seconds.append(timed.seconds)
                print(f"turn {number}: {timed.seconds:.1f} s", file=sys.stderr)
            epochs = stack.epochs(SESSION)
            sessions = SessionStore(stack.layout.home).directory(SESSION)
        facts: dict[str, Any] = {}
        if len(epochs) > 1:
            # A closed epoch ends with the summary's Assistant, its Usage and epoch_end.
            closed = [r for r in epochs[0] if isinstance(r, Assistant)]
            facts["summary_chars"] = len(closed[-1].content or "")
            first, second = (Baseline.load(baseline_path(sessions, n)) for n in (0, 1))
            facts["same_opening"] = (first.system, first.tools) == (second.system, second.tools)
        return completions(epochs), seconds, facts
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def render(done: list[Completion], seconds: list[float], facts: dict[str, Any], turns: int,
           slot_context: int) -> str:
    trigger = int(COMPACT_AT * slot_context)
    reread = rereads((c.cache_n, c.prompt_n) for c in done)
    rows = []
    for c, lost in zip(done, reread, strict=True):
        what = "summary (compaction)" if c.summary else "answer"
        wall = "" if c.summary else f"{seconds[c.turn - 1]:.1f}"
        rows.append(f"| {c.turn} | {c.epoch} | {what} | {c.cache_n:,} | {c.prompt_n:,} | "
                    f"{lost:,} | {c.cache_n + c.prompt_n + c.predicted_n:,} | {wall} |")
    at = next((i for i, c in enumerate(done) if c.summary), None)
    if at is None or at + 1 >= len(done):
        raise SystemExit(f"no compaction in {turns} turns of {slot_context}-token slots: "
                         "raise --turns or lower --slot-context")
    before, asked, first = done[at - 1], done[at], done[at + 1]
    turn = asked.turn
    others = [sum(c.prompt_n for c in done if c.turn == t) for t in range(2, turns + 1)
              if t != turn]
    after = [lost for c, lost in zip(done, reread, strict=True) if c.epoch == first.epoch][1:]
    holds = bool(after) and all(lost <= 1 for lost in after)
    verdict = (f"**cache hits again**: the {len(after)} request(s) after it in epoch "
               f"{first.epoch} re-read {sum(after)} tokens (each extended the one before)"
               if holds else f"**no cache hit after it**: re-read {after}")
    compactions = sum(1 for c in done if c.summary)
    more = "" if compactions == 1 else f" The run compacted {compactions} times; this is the first."
    same = "the same" if facts["same_opening"] else "NOT the same"
    slot = before.cache_n + before.prompt_n + before.predicted_n
    return f"""## Cache across a compaction (`bench/compaction_bench.py`)

Measured {today()} on {machine_line()}; {load_note()} at the end. This run: `--turns {turns}
--slot-context {slot_context}`; re-run with `scripts/bench compaction`. The whole local stack
(as in the cache section) with one llama-server router: the tiny Qwen 2.5 Coder 0.5B Q4_K_M,
`qwen-tools` preset, {SLOTS} slots of {slot_context:,} tokens, so loopd's compaction trigger
(`[loop] compact_at` 0.75) is {trigger:,} tokens. Each turn pastes one 900-byte note and asks for
one sentence (`tool_choice` none, greedy, {MAX_TOKENS} tokens per answer, summary at most
{SUMMARY_TOKENS}). One row per completion, from loopd's Usage records: *cache_n* and
*prompt_n* as the server reported them, *re-read* as in the cache section (tokens of the
previous request's prompt the cache did not cover), *slot after*: cache_n + prompt_n +
predicted_n. *s*: the turn's wall time, the compaction included in its turn's.

| turn | epoch | completion | cache_n | prompt_n | re-read | slot after | s |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Compaction ran before turn {turn}: turn {turn - 1} left {slot:,} tokens in the slot (trigger
{trigger:,}). The summary request extended epoch {asked.epoch}: cache_n {asked.cache_n:,},
prompt_n {asked.prompt_n:,} (the instruction), re-read {reread[at]:,}. Epoch {first.epoch}'s
first request kept cache_n {first.cache_n:,} tokens, the prefix both epochs share (their
baselines' system text and tools array are {same}), and processed prompt_n {first.prompt_n:,} (the
summary and the new note).
The cache section's formula counts {reread[at + 1]:,} tokens as re-read there; those tokens are
epoch {asked.epoch}'s conversation after that prefix and the instruction, which the new prompt no
longer holds, so none of them was read again.
The compaction turn processed {asked.prompt_n + first.prompt_n:,} prompt tokens in
all (the summary itself was {asked.predicted_n} generated tokens); the other turns after
the first processed a median of {statistics.median(others):,.0f}. After it: {verdict}.{more}
The summary, as epoch {first.epoch} shows it: {facts["summary_chars"]:,} characters.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=9)
    parser.add_argument("--slot-context", type=int, default=2560)
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    done, seconds, facts = run(args.turns, args.slot_context)
    text = render(done, seconds, facts, args.turns, args.slot_context)
    print(text if args.no_write else write_section("compaction", text))


if __name__ == "__main__":
    main()
