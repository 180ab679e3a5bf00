"""Benchmark: prompt tokens re-read per turn, Boxmaker vs a naive harness, on the real server.

    uv run python bench/cache_bench.py [--turns 20] [--restart-after 10] [--no-write]

Not a test. One run of the real llama-server built here (router mode, the project's qwen-tools
preset: the tiny Qwen with the bare-JSON tool template) serves both sides of the same
conversation, turn by turn, alternating which side goes first:

- **Boxmaker**: the whole local stack (``bxctl up``'s code: inferproxy, memoryd, brokerd with
  its sandbox, loopd in its own network namespace), driven over loop.sock. Tool calls go through
  brokerd to the toolkit in a fresh sandbox. loopd is restarted halfway through.
- **naive**: ``bench/naive_harness.py`` straight to llama-server's socket: a timestamp and a
  memory refresh at the end of the system prompt each turn, tool results trimmed in place once
  older than three turns; tools run as bare subprocesses of the same toolkit.

Both get the same system text (each with its own random nonce first, so the server's host-RAM
prompt cache cannot serve either from an earlier run), the same tools array (find_tool and
call_tool), the same user texts and the same ``tool_choice`` script (``required`` then ``none``
on tool turns: the tiny model does not pick tools by itself reliably), greedy sampling and 48
tokens per answer. The router runs three slots: Boxmaker's main slot 0, its background slot 1
(where loopd's start-up self-test runs), and slot 2 pinned for the naive harness alone.

Per completion, from the server's own timings: ``prompt_n`` (tokens processed) and ``cache_n``.
"Re-read" is the part of the previous request's prompt that the cache did not cover:
``max(0, previous cache_n + previous prompt_n - cache_n)``. A request that strictly extends the
previous one, on the same slot, re-reads nothing (the server always evaluates at least one new
token, which is new content here). Writes its section of docs/performance.md (bench:cache).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bxcore.records import ToolResult, Usage, User  # noqa: E402
from loopd.log import Record  # noqa: E402
from loopd.tools.registry import CALL_TOOL, FIND_TOOL, Registry, load_registry  # noqa: E402
from loopd.wiring import DEFAULT_SYSTEM  # noqa: E402
from naive_harness import Habits, NaiveHarness  # noqa: E402
from report import load_note, machine_line, today, write_section  # noqa: E402
from rig import StackSettings, running_stack, serving_dir  # noqa: E402
from support.llama import llama_paths  # noqa: E402

SESSION = "cache-bench"
MODEL = "qwen-tools"
# The 20-turn conversation with its tool results (about 7,600 tokens) stays below loopd's
# compaction trigger (75% of it): this benchmark measures one epoch; compaction_bench.py the change.
SLOT_CONTEXT = 16384
SLOTS = 3  # main, background, and one for the naive harness alone
NAIVE_SLOT = 2
DEPTH_0, DEPTH_32K = 1170.0, 669.0  # tokens/s on the owner's host (design brief, M0)
MAX_TOKENS = 72  # room for a call_tool call (about 50 tokens); answers are cut there
SAMPLING = {"temperature": 0.0, "top_p": 0.95, "top_k": 20}  # greedy, as both sides send
TOPICS = (
    "garden", "bicycle", "kitchen", "invoices", "backups", "travel", "books", "car", "health",
    "taxes", "roof", "music", "phone", "garage", "insurance", "printer", "bees", "boat",
    "firewood", "camera",
)


def presets(slot_context: int = SLOT_CONTEXT, slots: int = SLOTS) -> str:
    """serving/presets.ini with ``slots`` slots of ``slot_context`` tokens each; qwen-tools as
    is."""
    text = (ROOT / "serving" / "presets.ini").read_text()
    for key, value in (("c", slot_context * slots), ("np", slots)):
        text, count = re.subn(rf"^{key} = \d+$", f"{key} = {value}", text, count=1,
                              flags=re.MULTILINE)
        if count != 1:
            raise SystemExit(f"serving/presets.ini has no '{key} = ' line to change")
    return text


def write_notes(directory: Path) -> list[Path]:
    """One note of about 900 bytes per topic: what the tool calls read."""
    directory.mkdir()
    paths = []
    for number, topic in enumerate(TOPICS, 1):
        lines = [f"# Note {number}: {topic}", ""]
        lines += [f"- Item {j}: the {topic} needs attention {j} times a month; last checked on "
                  f"day {number + j}." for j in range(1, 13)]
        path = directory / f"note-{number:02d}.md"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def script(notes: list[Path], turns: int) -> list[tuple[str, list[str]]]:
    """The user texts and tool_choice of every turn: four tool turns, then one without."""
    turns_script = []
    for turn in range(1, turns + 1):
        if turn % 5 == 0:
            turns_script.append(("Thanks. In one sentence, what have we looked at so far?",
                                 ["none"]))
            continue
        path = notes[(turn - 1) % len(notes)]
        # Worded so the tiny model answers with the call alone and names the argument as the
        # schema does (tried against the real server: "call call_tool with {...}" made it
        # describe the call first and run out of tokens; without "path" it guessed "file").
        turns_script.append((
            f'Use call_tool to run fs.read with the argument "path": "{path}", then tell me in '
            "one sentence what the note is about.",
            ["required", "none"],
        ))
    return turns_script


def grants(directory: Path, notes: Path) -> Path:
    directory.mkdir()
    (directory / "notes.toml").write_text(
        'tools = ["fs.read"]\nmode = "auto"\nclasses = ["public", "private"]\n'
        f'result_class = "private"\n[arguments.path]\npaths = ["{notes}/**"]\n'
        f'[sandbox]\nmounts = [{{ path = "{notes}" }}]\n'
    )
    return directory


class BareTools:
    """The naive harness's tools: loopd's find_tool answer and call_tool's target run as a bare
    ``bx-tool`` subprocess, with no broker and no sandbox."""

    def __init__(self, registry: Registry, root: Path):
        self.registry = registry
        self.root = root
        self.sizes: list[int] = []  # characters of each result, before any trimming

    def __call__(self, name: str, arguments: str) -> str:
        try:
            args: Any = json.loads(arguments)
        except ValueError:
            return f"Not run: the arguments of {name} are not JSON."
        if not isinstance(args, dict):
            return f"Not run: the arguments of {name} are not a JSON object."
        if name == FIND_TOOL.name:
            return self.registry.find_tool_text(str(args.get("query", "")))
        target = args.get("name")
        if name != CALL_TOOL.name or not isinstance(target, str) or \
                not self.registry.is_discoverable(target):
            return f"Unknown tool {target if name == CALL_TOOL.name else name!r}."
        inner = args.get("arguments", {})
        if isinstance(inner, str):
            inner = json.loads(inner) if inner.strip().startswith("{") else {}
        command = [str(Path(sys.executable).parent / "bx-tool"), target, "--class", "private",
                   "--root", str(self.root), json.dumps(inner)]
        result = json.loads(subprocess.run(command, capture_output=True, text=True,
                                           check=False).stdout)
        output = str(result.get("content", result.get("error", "")))
        self.sizes.append(len(output))
        return output


@dataclass
class Side:
    """One harness's figures: per turn, the (cache_n, prompt_n) of each completion, and the
    turn's wall time."""

    completions: list[list[tuple[int, int]]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def prompt_n(self) -> list[int]:
        return [sum(p for _, p in turn) for turn in self.completions]

    def reread(self) -> list[int]:
        """Per turn: tokens of each previous request's prompt the cache did not cover."""
        each = iter(rereads(c for turn in self.completions for c in turn))
        return [sum(next(each) for _ in turn) for turn in self.completions]


def rereads(completions: Iterable[tuple[int, int]]) -> list[int]:
    """Per (cache_n, prompt_n) of a slot's completions in order: the tokens of the previous
    request's prompt that the cache did not cover (none for the first)."""
    result, previous = [], None
    for cache_n, prompt_n in completions:
        result.append(0 if previous is None else max(0, previous - cache_n))
        previous = cache_n + prompt_n
    return result


def boxmaker_completions(records: Iterable[Record]) -> list[list[tuple[int, int]]]:
    """Per turn (a turn starts at its User record), the Usage of each completion, from the log."""
    turns: list[list[tuple[int, int]]] = []
    for record in records:
        if isinstance(record, User):
            turns.append([])
        elif isinstance(record, Usage):
            turns[-1].append((record.cache_n, record.prompt_n))
    return turns


def system_text(nonce: str) -> str:
    return f"[run {nonce}] " + DEFAULT_SYSTEM.read_text()


def run(turns: int, restart_after: int, keep: bool = False) -> tuple[Side, Side, dict[str, Any]]:
    directory = Path(tempfile.mkdtemp(prefix="bx-cache-"))
    notes = write_notes(directory / "notes")
    settings = StackSettings(
        model=MODEL, max_tokens=MAX_TOKENS, per_slot_context=SLOT_CONTEXT, slot_count=SLOTS,
        temperature=SAMPLING["temperature"], system=system_text(secrets.token_hex(6)),
    )
    boxmaker, naive = Side(), Side()
    facts: dict[str, Any] = {}
    try:
        conversation(directory, notes, settings, turns, restart_after, boxmaker, naive, facts)
    finally:
        if keep:
            print(f"kept {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return boxmaker, naive, facts


def conversation(
    directory: Path, notes: list[Path], settings: StackSettings, turns: int, restart_after: int,
    boxmaker: Side, naive: Side, facts: dict[str, Any],
) -> None:
    """Both sides of the conversation, turn by turn; fills ``boxmaker``, ``naive``, ``facts``."""
    binary, models = llama_paths()
    with running_stack(
        directory, llama_server=binary, models=models, serving=serving_dir(directory, presets()),
        grants=grants(directory / "grants", directory / "notes"), settings=settings,
    ) as stack, httpx.Client(
        # The pool keeps idle connections 2 s, as loopd's does: llama-server closes them at 5 s,
        # and equal limits race (an earlier 20-turn run died on that "Server disconnected").
        transport=httpx.HTTPTransport(
            uds=str(stack.layout.socket("llama")), limits=httpx.Limits(keepalive_expiry=2.0)
        ),
        base_url="http://llama", timeout=None,
    ) as http:
        registry = load_registry(stack.layout.state / "toolkit-schemas.json")
        tools = BareTools(registry, directory / "notes")
        harness = NaiveHarness(
            http, model=MODEL, system=system_text(secrets.token_hex(6)).rstrip(),
            tools=[s.as_openai_tool() for s in registry.core_schemas()],
            run_tool=tools, slot=NAIVE_SLOT,
            sampling=SAMPLING, max_tokens=MAX_TOKENS, habits=Habits(),
        )
        facts["habits"] = harness.habits.describe()
        for number, (text, choice) in enumerate(script(notes, turns), 1):
            if number == restart_after + 1:
                stack.restart("loopd")
                print(f"turn {number}: loopd restarted", file=sys.stderr)
            sides = ["boxmaker", "naive"] if number % 2 else ["naive", "boxmaker"]
            for side in sides:
                if side == "boxmaker":
                    timed = stack.turn(SESSION, text, resume=number > 1, tool_choice=choice)
                    boxmaker.seconds.append(timed.seconds)
                else:
                    done = harness.turn(text, choice)
                    naive.completions.append([(c.cache_n, c.prompt_n) for c in done.completions])
                    naive.seconds.append(done.seconds)
            print(f"turn {number}: boxmaker {boxmaker.seconds[-1]:.1f} s, naive "
                  f"{naive.seconds[-1]:.1f} s", file=sys.stderr)
        records = stack.records(SESSION)
        boxmaker.completions = boxmaker_completions(records)
        facts["cache_losses"] = sum(1 for r in records if r.type == "cache_loss")
        results = [r for r in records if isinstance(r, ToolResult)]
        facts["tool_results"] = f"{len(results)} ({sum(len(r.content) for r in results):,} chars)"
        facts["naive_tool_results"] = f"{len(tools.sizes)} ({sum(tools.sizes):,} chars)"
        facts["naive_resent"] = harness.resent
        last = boxmaker.completions[-1][-1]
        facts["final_prompt"] = last[0] + last[1]
        if len(stack.epochs(SESSION)) > 1:
            raise SystemExit("Boxmaker's session was compacted: raise SLOT_CONTEXT, this "
                             "benchmark compares one epoch")


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.1f}x" if denominator else "n/a"


def render(boxmaker: Side, naive: Side, facts: dict[str, Any], turns: int,
           restart_after: int) -> str:
    b_prompt, n_prompt = boxmaker.prompt_n(), naive.prompt_n()
    b_reread, n_reread = boxmaker.reread(), naive.reread()
    rows = []
    for i in range(turns):
        mark = " (after loopd restart)" if i == restart_after else ""
        tools = "yes" if len(boxmaker.completions[i]) > 1 else "no"
        rows.append(
            f"| {i + 1}{mark} | {tools} | {b_prompt[i]:,} | {b_reread[i]:,} | "
            f"{boxmaker.seconds[i]:.1f} | {n_prompt[i]:,} | {n_reread[i]:,} | "
            f"{naive.seconds[i]:.1f} | {ratio(n_prompt[i], b_prompt[i])} |"
        )
    b_total, n_total = sum(b_prompt), sum(n_prompt)
    b_time, n_time = sum(boxmaker.seconds), sum(naive.seconds)
    rows.append(
        f"| **total** | | **{b_total:,}** | **{sum(b_reread):,}** | **{b_time:.1f}** | "
        f"**{n_total:,}** | **{sum(n_reread):,}** | **{n_time:.1f}** | "
        f"**{ratio(n_total, b_total)}** |"
    )
    later = b_reread[1:]  # the first request of a session has no previous prompt
    holds = all(value <= 1 for value in later)
    verdict = (
        f"**holds**: after its first request, Boxmaker re-read {sum(later)} tokens of earlier "
        f"prompts in {turns - 1} turns, across the loopd restart before turn {restart_after + 1}"
        if holds else
        f"**does NOT hold**: Boxmaker re-read {later} tokens of earlier prompts per turn"
    )
    return f"""## Cache efficiency: Boxmaker vs a naive harness (`bench/cache_bench.py`)

This run: `--turns {turns} --restart-after {restart_after}`.

Measured {today()} on {machine_line()}; {load_note()} at the end. One llama-server router
(tiny Qwen 2.5 Coder 0.5B Q4_K_M, `qwen-tools` preset with 3 slots of {SLOT_CONTEXT:,} tokens)
serves both sides of the same {turns}-turn conversation, turn by turn: Boxmaker as the whole
local stack over loop.sock (tool calls through brokerd into a bubblewrap or podman sandbox),
and `bench/naive_harness.py` straight to the server's socket (habits: {facts["habits"]}; the
volatile text at the end of the system prompt, pinned to its own slot: the kindest placement
for it). Same system text after a per-side random nonce, same tools array (find_tool,
call_tool), same user texts, same `tool_choice` script, greedy sampling, {MAX_TOKENS} tokens per
completion. Tool turns read a 900-byte note with `fs.read` through `call_tool`.

*prompt_n*: tokens the server processed for the turn (all its completions). *re-read*: tokens
of each previous request's prompt that the cache did not cover. *s*: wall time of the turn,
tool runs included (Boxmaker's in its sandbox, whose cost per call is the sandbox section's;
the naive harness runs tools bare). *ratio*: naive prompt_n / Boxmaker prompt_n.

| turn | tool call | Boxmaker prompt_n | re-read | s | naive prompt_n | re-read | s | ratio |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Append-only: {verdict}. {facts["cache_losses"]} cache losses logged. Final prompt
{facts["final_prompt"]:,} tokens; tool results (count and characters as first appended):
Boxmaker {facts["tool_results"]}, naive {facts["naive_tool_results"]}. The server dropped
{facts["naive_resent"]} of the naive harness's (non-streamed) completions without an answer;
each was sent again and only the answered one is counted. The session stays in
its first epoch (the slot never reaches loopd's compaction trigger); what a compaction costs is
measured in its own section, `bench/compaction_bench.py`.

The naive harness processed {ratio(n_total, b_total)} the prompt tokens and took
{ratio(n_time, b_time)} the wall time. On the owner's host prompt processing runs at about
{DEPTH_0:,.0f} tokens/s at depth 0 and {DEPTH_32K:,.0f} at 32k (design brief), so a re-read of a
32,768-token conversation would cost {32768 / DEPTH_0:.0f} to {32768 / DEPTH_32K:.0f} s
per turn, where Boxmaker pays only for the new tokens.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--restart-after", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    parser.add_argument("--keep", action="store_true", help="keep the state directory (logs)")
    args = parser.parse_args()
    boxmaker, naive, facts = run(args.turns, args.restart_after, args.keep)
    text = render(boxmaker, naive, facts, args.turns, args.restart_after)
    print(text if args.no_write else write_section("cache", text))


if __name__ == "__main__":
    main()
