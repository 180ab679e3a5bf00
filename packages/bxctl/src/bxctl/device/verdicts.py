"""The verdicts of ``bxctl verify-device``, as pure functions of what was measured: no I/O here.

Each contract item ends as one ``Verdict``: ``pass`` or ``FAIL`` where the contract says what
must hold, ``measured`` where the figure is the point (speeds, what a queued request streams,
what a diverging request re-reads), ``not supported`` where the server or model has no such
mechanism (a model with no reasoning block has no block to end). Only a ``FAIL`` makes the
command exit non-zero.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bxcore.chat import ToolCall
from bxcore.records import AnyRecord, Assistant, CacheLoss, ToolResult, Usage

Status = Literal["pass", "FAIL", "measured", "not supported"]

# Tokens of a previous prompt a request may evaluate again and still count as reusing it: the
# server always evaluates at least the last token, and a template may render a replayed answer's
# end differently from how it was generated (loopd's slot_switch check allows the same).
SLACK = 4
# Reasoning deltas that may still arrive after the control call was answered: those the server
# had sampled before it read the call.
REASONING_SLACK = 4


@dataclass(frozen=True, kw_only=True)
class Verdict:
    item: str
    status: Status
    detail: str

    def line(self) -> str:
        return f"{self.status.upper()}: {self.item}: {self.detail}"


def broken(verdicts: Sequence[Verdict]) -> list[Verdict]:
    return [verdict for verdict in verdicts if verdict.status == "FAIL"]


@dataclass(frozen=True)
class Depth:
    requested: int
    used: int  # capped so that the depth and the new tokens fit the slot

    @property
    def capped(self) -> bool:
        return self.used < self.requested


def depth_plan(requested: Sequence[int], slot_context: int, new_tokens: int) -> list[Depth]:
    """Each requested depth, capped at what the slot holds with ``new_tokens`` (and one token to
    generate) after it."""
    room = max(0, slot_context - new_tokens - 1)
    return [Depth(depth, min(depth, room)) for depth in requested]


def rereads(completions: Sequence[tuple[int, int]]) -> list[int]:
    """Per (cache_n, prompt_n) of one slot's requests in order: the tokens of the previous
    request's prompt the cache did not cover (0 for the first)."""
    result, previous = [], None
    for cache_n, prompt_n in completions:
        result.append(0 if previous is None else max(0, previous - cache_n))
        previous = cache_n + prompt_n
    return result


def cache_reuse_verdict(completions: Sequence[tuple[int, int]], turns: int) -> Verdict:
    """Every request of a conversation that extends the one before reuses its whole prompt."""
    lost = [(n, value) for n, value in enumerate(rereads(completions)) if value > SLACK]
    detail = (f"{turns} turns, {len(completions)} requests; tokens of the previous prompt "
              f"re-read per request: {rereads(completions)}")
    return Verdict(item="cache reuse over a tool conversation", status="FAIL" if lost else "pass",
                   detail=detail + (f"; lost at requests {[n + 1 for n, _ in lost]}"
                                    if lost else ""))


def tool_parsing_verdict(problems: Sequence[str | None]) -> Verdict:
    """Each trial's problem (None: a parsed tool call with a JSON object as its arguments)."""
    failed = [(n + 1, problem) for n, problem in enumerate(problems) if problem is not None]
    detail = f"{len(problems) - len(failed)} of {len(problems)} trials parsed"
    if failed:
        detail += "; " + "; ".join(f"trial {n}: {problem}" for n, problem in failed[:3])
    return Verdict(item="tool-call parsing", status="FAIL" if failed or not problems else "pass",
                   detail=detail)


@dataclass(frozen=True, kw_only=True)
class ReasoningProbe:
    """What a streamed request asking for reasoning control showed."""

    reasoning_before: int  # reasoning deltas before the control call
    control: str | None  # the call's answer: "success" or the server's words; None: not sent
    reasoning_after: int  # reasoning deltas after the control call was answered
    content_after: int  # content deltas after it


def reasoning_verdict(probe: ReasoningProbe) -> Verdict:
    item = "the control endpoint ends a reasoning block"
    if probe.reasoning_before == 0 or probe.control is None:
        return Verdict(item=item, status="not supported",
                       detail="the model opened no reasoning block, so there is none to end")
    if probe.control != "success":
        return Verdict(item=item, status="not supported",
                       detail=f"the server refused the control call: {probe.control}")
    counts = (f"{probe.reasoning_before} reasoning deltas before the call, "
              f"{probe.reasoning_after} after its answer, then {probe.content_after} content "
              f"deltas")
    if probe.reasoning_after <= REASONING_SLACK:
        return Verdict(item=item, status="pass", detail=counts)
    return Verdict(item=item, status="FAIL",
                   detail=f"the call was accepted but the block went on: {counts}")


_REPORT_LINE = re.compile(r"^(ok  |FAIL) ([A-Za-z_]+): (.*)$")


def report_verdicts(output: str, returncode: int, what: str) -> list[Verdict]:
    """A loopd report (``loopd selftest``, ``loopd budget``): one verdict per ``ok``/``FAIL``
    line; a failed run with no such line is one FAIL with its last line."""
    verdicts = []
    for line in output.splitlines():
        match = _REPORT_LINE.match(line)
        if match:
            verdicts.append(Verdict(item=f"{what}: {match.group(2)}",
                                    status="pass" if match.group(1) == "ok  " else "FAIL",
                                    detail=match.group(3)))
    if returncode != 0 and not broken(verdicts):
        last = output.strip().splitlines()[-1:] or [f"exit {returncode}"]
        verdicts.append(Verdict(item=what, status="FAIL", detail=last[0]))
    return verdicts


def _calls(records: Sequence[AnyRecord]) -> list[ToolCall]:
    return [call for r in records if isinstance(r, Assistant) for call in r.tool_calls or ()]


def conversation_verdicts(records: Sequence[AnyRecord], restarted_at: int) -> list[Verdict]:
    """The on-device conversation's log (docs/design.md, the owner's device): one Usage right after
    each completion, no CacheLoss, a ToolResult per tool call (``clock``, and ``echo`` through
    ``find_tool`` and ``call_tool``), and the first completion after the restart (records from
    ``restarted_at`` on) reusing the whole prompt of the last one before it."""
    types = [r.type for r in records]
    completions = types.count("assistant")
    unpaired = [n for n, t in enumerate(types)
                if t == "assistant" and (n + 1 == len(types) or types[n + 1] != "usage")]
    usages = types.count("usage")
    verdicts = [Verdict(
        item="conversation: one Usage per completion",
        status="pass" if completions and usages == completions and not unpaired else "FAIL",
        detail=f"{completions} completions, {usages} Usage records"
        + (f"; no Usage right after records {unpaired}" if unpaired else ""))]
    losses = [r for r in records if isinstance(r, CacheLoss)]
    verdicts.append(Verdict(
        item="conversation: no CacheLoss", status="FAIL" if losses else "pass",
        detail=f"{len(losses)} CacheLoss records"
        + "".join(f"; expected {r.expected}, got {r.got}" for r in losses[:3])))
    calls = _calls(records)
    results = {r.tool_call_id: r for r in records if isinstance(r, ToolResult)}
    missing = [c.function.name for c in calls if c.id not in results]
    names = [c.function.name for c in calls]
    echoed = [c for c in calls if c.function.name == "call_tool" and '"echo"' in
              c.function.arguments.replace(" ", "")]
    wanted = [name for name, there in (("clock", "clock" in names),
                                       ("find_tool", "find_tool" in names),
                                       ("call_tool echo", bool(echoed))) if not there]
    verdicts.append(Verdict(
        item="conversation: a ToolResult per tool call",
        status="FAIL" if missing or wanted or not calls else "pass",
        detail=f"{len(calls)} tool calls ({', '.join(names) or 'none'}), {len(results)} "
        f"ToolResults" + (f"; without a result: {missing}" if missing else "")
        + (f"; never called: {wanted}" if wanted else "")))
    verdicts.append(_resumed(records, restarted_at))
    return verdicts


def _resumed(records: Sequence[AnyRecord], restarted_at: int) -> Verdict:
    item = "conversation: resumed after a loopd restart, from the cache"
    before = [r for r in records[:restarted_at] if isinstance(r, Usage)]
    after = [r for r in records[restarted_at:] if isinstance(r, Usage)]
    if not before or not after:
        return Verdict(item=item, status="FAIL",
                       detail=f"{len(before)} completions before the restart, {len(after)} after")
    previous = before[-1].cache_n + before[-1].prompt_n
    reread = max(0, previous - after[0].cache_n)
    # cache_n may exceed the previous prompt: the slot also holds the answer generated to it.
    return Verdict(item=item, status="pass" if reread <= SLACK else "FAIL",
                   detail=f"the first completion after the restart found {after[0].cache_n} "
                   f"tokens cached; the last prompt before it had {previous}, of which it "
                   f"re-read {reread}")
