"""The pure parts of ``bxctl verify-device``, with generated inputs: each verdict function,
the SSE accumulator, the scratch config (judged by the real config parser) and the document."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bxcore.chat import ToolCall
from bxcore.config import Config, InferenceSection, parse_config
from bxcore.records import Assistant, CacheLoss, ToolResult, Usage, User
from bxcore.tools import ToolRequest
from bxcore.util import is_rfc3339
from bxctl.device.conversation import scratch_config
from bxctl.device.document import SECTIONS, Outcome, render
from bxctl.device.measure import Figure
from bxctl.device.router import Stream
from bxctl.device.scratch_broker import answer
from bxctl.device.verdicts import (
    REASONING_SLACK,
    SLACK,
    ReasoningProbe,
    Verdict,
    cache_reuse_verdict,
    conversation_verdicts,
    depth_plan,
    reasoning_verdict,
    report_verdicts,
    tool_parsing_verdict,
)
from hypothesis import given
from hypothesis import strategies as st

TIME = "2026-12-03T10:00:00Z"
counts = st.integers(min_value=0, max_value=200_000)


@given(st.lists(counts, max_size=6), st.integers(1, 200_000), st.integers(1, 4096))
def test_a_depth_is_capped_exactly_when_it_and_the_new_tokens_overflow_the_slot(
        requested, context, new):
    for depth in depth_plan(requested, context, new):
        assert depth.used <= depth.requested
        room = max(0, context - new - 1)  # the slot with the new tokens and one generated
        assert depth.capped == (depth.requested > room)
        assert depth.used == min(depth.requested, room)


@st.composite
def extensions(draw):
    """(cache_n, prompt_n) of requests that each extend the one before by a few tokens."""
    first = draw(st.integers(1, 5000))
    seen, total = [(0, first)], first
    for _ in range(draw(st.integers(0, 12))):
        generated, new = draw(st.integers(0, 200)), draw(st.integers(1, 500))
        cached = total + draw(st.integers(0, generated))
        seen.append((cached, total + generated + new - cached))
        total += generated + new
    return seen


@given(extensions(), st.data())
def test_cache_reuse_fails_exactly_when_a_request_lost_more_than_the_slack(seen, data):
    assert cache_reuse_verdict(seen, 3).status == "pass"
    if len(seen) < 2:
        return
    at = data.draw(st.integers(1, len(seen) - 1))
    lost = data.draw(st.integers(1, seen[at - 1][0] + seen[at - 1][1]))
    cached, prompt = seen[at]
    broken = [*seen[:at], (max(0, cached - lost), prompt + min(lost, cached)), *seen[at + 1:]]
    verdict = cache_reuse_verdict(broken, 3)
    previous_prompt = sum(seen[at - 1])  # what the dropped cache now covers less of
    assert (verdict.status == "FAIL") == (previous_prompt - max(0, cached - lost) > SLACK), verdict


@given(st.lists(st.none() | st.text(min_size=1, max_size=20), max_size=25))
def test_tool_parsing_passes_only_when_every_trial_parsed(problems):
    verdict = tool_parsing_verdict(problems)
    assert (verdict.status == "pass") == (bool(problems) and all(p is None for p in problems))
    assert verdict.detail.startswith(f"{sum(p is None for p in problems)} of {len(problems)}")


@given(st.integers(0, 50), st.none() | st.sampled_from(["success", "{'success': False}"]),
       st.integers(0, 50), st.integers(0, 50))
def test_reasoning_control_is_judged_only_where_a_block_was_opened_and_the_call_accepted(
        before, control, after, content):
    verdict = reasoning_verdict(ReasoningProbe(reasoning_before=before, control=control,
                                               reasoning_after=after, content_after=content))
    if before == 0 or control != "success":
        assert verdict.status == "not supported"
    else:
        assert verdict.status == ("pass" if after <= REASONING_SLACK else "FAIL")


names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
details = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40)


@given(st.lists(st.tuples(st.booleans(), names, details), max_size=8), st.integers(0, 3),
       st.lists(details, max_size=3))
def test_a_loopd_report_gives_one_verdict_per_check_line_and_a_failed_run_always_fails(
        checks, returncode, noise):
    lines = [*noise, *(f"{'ok  ' if ok else 'FAIL'} {n}: {d}" for ok, n, d in checks),
             "self-test: done"]
    verdicts = report_verdicts("\n".join(lines), returncode, "self-test")
    named = [v for v in verdicts if v.item != "self-test"]
    assert [(v.status == "pass", v.item) for v in named] == \
        [(ok, f"self-test: {n}") for ok, n, _ in checks]
    assert any(v.status == "FAIL" for v in verdicts) == (
        returncode != 0 or not all(ok for ok, _, _ in checks))


def _usage(cache_n: int, prompt_n: int) -> Usage:
    return Usage(time=TIME, cache_n=cache_n, prompt_n=prompt_n, predicted_n=5,
                 reasoning_tokens=0, thinking_capped=False)


def _call(n: int, name: str, arguments: str) -> ToolCall:
    return ToolCall.model_validate({"id": f"c{n}", "type": "function",
                                    "function": {"name": name, "arguments": arguments}})


def conversation_log(plain: int) -> tuple[list, int]:
    """A well-formed log: ``plain`` plain turns, clock, echo through find_tool, a restart, one
    more turn; prompts growing as strict extensions."""
    records: list = []
    total = 100
    calls = [[], [_call(1, "clock", "{}")], [_call(2, "find_tool", '{"query": "echo"}'),
                                             _call(3, "call_tool", '{"name": "echo"}')]]
    restarted_at = 0
    for turn, made in enumerate([[]] * plain + calls + [[]]):
        if turn == plain + len(calls):
            restarted_at = len(records)
        records.append(User(time=TIME, content="hi"))
        for call in [*made, None]:
            records.append(Assistant(time=TIME, content="", reasoning_content=None,
                                     tool_calls=None if call is None else [call]))
            records.append(_usage(total, 10))
            total += 20
            if call is not None:
                records.append(ToolResult.model_validate({
                    "time": TIME, "call": 1, "tool_call_id": call.id, "content": "x",
                    "class": "public", "untrusted": False, "truncated": False}))
    return records, restarted_at


@given(st.integers(0, 3), st.sampled_from(["none", "usage", "loss", "result", "resume"]),
       st.data())
def test_each_conversation_check_fails_exactly_for_its_own_fault(plain, fault, data):
    records, restarted_at = conversation_log(plain)
    kinds = {"usage": Usage, "result": ToolResult}
    restart = records[restarted_at]
    if fault in kinds:  # one record of the kind dropped (before the restart: the one turn
        # after it is the resume check's own)
        where = [n for n, r in enumerate(records[:restarted_at]) if isinstance(r, kinds[fault])]
        del records[data.draw(st.sampled_from(where))]
        restarted_at = next(n for n, r in enumerate(records) if r is restart)
    elif fault == "loss":  # loopd writes it after the Usage of the completion that lost
        after = [n + 1 for n, r in enumerate(records) if isinstance(r, Usage)]
        records.insert(data.draw(st.sampled_from(after)), CacheLoss(time=TIME, expected=500,
                                                                    got=3))
        restarted_at = next(n for n, r in enumerate(records) if r is restart)
    elif fault == "resume":
        at = next(n for n in range(restarted_at, len(records)) if isinstance(records[n], Usage))
        records[at] = _usage(data.draw(st.integers(0, 50)), 5000)
    failed = [v.item for v in conversation_verdicts(records, restarted_at) if v.status == "FAIL"]
    expected = {"none": [], "usage": ["conversation: one Usage per completion"],
                "loss": ["conversation: no CacheLoss"],
                "result": ["conversation: a ToolResult per tool call"],
                "resume": ["conversation: resumed after a loopd restart, from the cache"]}
    assert failed == expected[fault]


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=60), st.data())
def test_tool_call_arguments_split_anywhere_across_deltas_come_back_whole(arguments, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(arguments)), max_size=6)))
    pieces = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
    stream = Stream()
    first = {"index": 0, "id": "abc", "type": "function",
             "function": {"name": "read_file", "arguments": pieces[0]}}
    deltas = [first, *({"index": 0, "function": {"arguments": p}} for p in pieces[1:])]
    for delta in deltas:
        stream.feed("data: " + json.dumps({"id": "x", "choices": [{"delta": {
            "tool_calls": [delta]}}]}))
        stream.feed(": keep-alive")
    stream.feed("data: [DONE]")
    assert stream.message()["tool_calls"] == [{"id": "abc", "type": "function", "function": {
        "name": "read_file", "arguments": arguments}}]


sections = st.builds(
    InferenceSection, model=st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
    max_tokens=st.none() | st.integers(1, 4096),
    liveness_timeout=st.floats(0.5, 10_000), cache_loss_ratio=st.floats(0.01, 1),
    baseline_budget=st.integers(1, 100_000))


@given(sections, st.sampled_from(["q8_0", "f16/q4_0", None]), st.booleans())
def test_the_scratch_config_keeps_the_deployed_inference_section_and_nothing_else(
        inference, kv, system):
    serving = inference.serving.model_copy(update={"kv_cache_type": kv and (
        kv if "/" in kv else f"{kv}/{kv}")})
    config = Config(inference=inference.model_copy(update={"serving": serving}))
    scratch = Path("/tmp/scratch-dir")
    text = scratch_config(config, Path("/etc/system.md") if system else None, scratch)
    parsed = parse_config(text, "scratch.toml")
    assert parsed.inference == config.inference
    assert parsed.paths.home == scratch / "home"
    assert parsed.loop.registry == scratch / "registry.json"
    assert parsed.loop.memory == "off" and parsed.baseline.identity == []
    assert parsed.served("infer").path == config.served("infer").path


figures = st.builds(Figure, name=st.text(min_size=1, max_size=30), unit=st.sampled_from(
    ["tokens/s", "s", "tokens"]), value=st.floats(0, 1e6), how=st.text(max_size=60))
verdicts = st.builds(Verdict, item=st.text(min_size=1, max_size=30), detail=st.text(max_size=60),
                     status=st.sampled_from(["pass", "FAIL", "measured", "not supported"]))


@given(st.lists(figures, max_size=8), st.lists(verdicts, max_size=8))
def test_the_document_has_every_section_and_a_numeric_value_per_figure(shown, judged):
    text = render(Outcome(command="bxctl verify-device", date="today", machine=[("CPU", "x")],
                          server=[("build", "b1")], verdicts=judged, figures=shown,
                          reports=[("loopd selftest", "ok")], conversation=["{}"]))
    assert re.findall(r"^## (.+)$", text, flags=re.MULTILINE) == list(SECTIONS)
    table = text.split("## Measurements\n")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]  # past the head
    values = [line.split(" | ")[-3] for line in rows]
    assert len(values) == len(shown)
    assert all(re.fullmatch(r"[\d,]+(\.\d\d)?", value) for value in values), values
    assert ("broken" in text.split("## Machine")[0]) == any(v.status == "FAIL" for v in judged)


@given(st.text(max_size=40), st.sampled_from(["clock", "echo", "fs.read"]))
def test_the_scratch_broker_answers_clock_and_echo_and_refuses_every_other_tool(text, tool):
    request = ToolRequest.model_validate({
        "session": "verify-device-1", "call": 1, "tool": tool,
        "arguments": json.dumps({"text": text})})
    got = answer(request)
    if tool == "echo":
        assert (got.status, got.content) == ("ok", text)
    elif tool == "clock":
        assert got.status == "ok" and is_rfc3339(got.content)
    else:
        assert got.status == "failed"
