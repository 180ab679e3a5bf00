"""The peers benchmark's section says what the recorded figures say: the ≥10x goal met or NOT
met per peer, the re-read goal from Boxmaker's own requests, and a peer that could not run."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from peer_harnesses import PeerTurn
from peers_bench import Harness, steps
from peers_render import PeersRun, render
from recording_proxy import Exchange

STEPS = steps([Path(f"/notes/note-{n}.md") for n in range(4)])
SYSTEM = {"role": "system", "content": "rules"}


def exchanges(harness, first, later, *, reread_at=None):
    """One completion per turn, each extending the previous one of its session (unless the
    turn is ``reread_at``, whose request starts the conversation again)."""
    made, count = [], {}
    for number, step in enumerate(STEPS, 1):
        count[step.session] = count.get(step.session, 0) + 1
        n = count[step.session]
        messages = [SYSTEM] + [{"role": "user", "content": str(i)} for i in range(n)]
        cached = 0 if n == 1 else first + later * (n - 2)
        if number == reread_at:
            messages, cached = [SYSTEM, {"role": "user", "content": "again"}], 0
        made.append(Exchange(f"{harness}|{step.session}|{number}", "POST",
                             "/v1/chat/completions", {"messages": messages}, 200,
                             {"cache_n": cached, "prompt_n": first if n == 1 else later}, 1.0))
    return made


def outcome(*recorded, failed=None):
    turns = [PeerTurn(1.0, True, "")] * len(STEPS)
    harnesses = [Harness("boxmaker", "Boxmaker", "stack", turns=list(turns)),
                 Harness("hermes", "Hermes", "cmd", turns=list(turns))]
    if failed:
        harnesses.append(Harness("openclaw", "OpenClaw", failure=failed))
    return PeersRun(harnesses, [e for r in recorded for e in r], STEPS, "qwen-tools", 4, 24576, 72,
                   60.0, "/notes", "8192", 60.0, "2026-01-01 on a test machine; load average 1.0")


def test_a_peer_processing_ten_times_the_tokens_meets_the_goal_and_the_figures_are_said():
    text = render(outcome(exchanges("boxmaker", 500, 40), exchanges("hermes", 5000, 400)))
    # Boxmaker: 2 sessions x 500 + 6 x 40 = 1,240; Hermes ten times that.
    assert ("Hermes processed 12,400 prompt tokens over the turns run, Boxmaker 1,240: 10.0x "
            "as many, so the ≥10x goal is met against it.") in text
    assert "the \"0 re-read tokens in every turn\" goal is met" in text
    assert "across the restart before turn 2 and in 2 sessions" in text
    assert "Measured 2026-01-01 on a test machine; load average 1.0 at the end" in text


def test_a_peer_below_ten_times_does_not_meet_the_goal():
    # Hermes: 2 x 4,000 + 6 x 400 = 10,400
    text = render(outcome(exchanges("boxmaker", 500, 40), exchanges("hermes", 4000, 400)))
    assert "8.4x as many, so the ≥10x goal is NOT met against it" in text


def test_a_boxmaker_request_that_starts_again_misses_the_reread_goal_and_says_what_changed():
    # turn 5 is session 2's third: its previous request had 500 cached + 40 processed
    text = render(outcome(exchanges("boxmaker", 500, 40, reread_at=5),
                          exchanges("hermes", 5000, 400)))
    assert "the \"0 re-read tokens in every turn\" goal is NOT met" in text
    assert "Boxmaker re-read 540 tokens in turn 5: message 1 (user) changed at char 0" in text


def test_a_peer_that_could_not_be_installed_is_reported_with_its_error():
    text = render(outcome(exchanges("boxmaker", 500, 40), exchanges("hermes", 5000, 400),
                          failed=f"npm install failed in {Path.home()}/x"))
    assert "OpenClaw could not be run here: npm install failed in ~/x." in text


def forced_turn(*, called):
    """Boxmaker's first turn asks for a call; the server answers it with one (the turn's next
    request carries its result) or with text (the turn has no next request)."""
    ask = [SYSTEM, {"role": "user", "content": "read"}]
    made = [Exchange("boxmaker|1|1", "POST", "/v1/chat/completions",
                     {"messages": ask, "tool_choice": "required"}, 200,
                     {"cache_n": 0, "prompt_n": 500}, 1.0)]
    if called:
        result = [*ask, {"role": "assistant", "content": ""}, {"role": "tool", "content": "x"}]
        made.append(Exchange("boxmaker|1|1", "POST", "/v1/chat/completions",
                             {"messages": result, "tool_choice": "none"}, 200,
                             {"cache_n": 500, "prompt_n": 30}, 1.0))
    return made


def test_a_required_completion_answered_with_text_is_counted_and_said():
    text = render(outcome(forced_turn(called=False), exchanges("hermes", 5000, 400)))
    assert ("Boxmaker asked for a tool call (`required`) in 1 completion; the server answered "
            "0 with a call and 1 with text (docs/decisions/benchmarks.md)") in text


def test_a_required_completion_answered_with_a_call_is_counted():
    text = render(outcome(forced_turn(called=True), exchanges("hermes", 5000, 400)))
    assert ("Boxmaker asked for a tool call (`required`) in 1 completion; the server answered "
            "1 with a call.") in text


def test_a_completion_without_timings_is_said_and_the_verdict_says_it_is_not_counted():
    untimed = Exchange("hermes|1|1", "POST", "/v1/chat/completions", {"messages": [SYSTEM]},
                       200, None, 233.0, tail='data: {"error": "gone"}')
    # Hermes's next completion found 5,000 tokens cached where the counted ones had left none:
    # (7,401 counted + 5,000) / 1,240 = 10.0x
    recorded = exchanges("hermes", 5000, 400)
    recorded[0] = replace(recorded[0], timings={"cache_n": 5000, "prompt_n": 1})
    text = render(outcome(exchanges("boxmaker", 500, 40), [untimed, *recorded]))
    assert ("so the ≥10x goal is NOT met against it (0 of Boxmaker's and 1 of its completions "
            "not counted, below; with the tokens they left in the cache, 10.0x)") in text
    assert ("Hermes: 1 completion came back without the server's timings and is not counted "
            "(status 200 after 233 s, ending 'data: {\"error\": \"gone\"}'); the next "
            "completions found 5,000 more tokens in the cache than the counted ones had left "
            "there.") in text


def test_an_answer_the_harness_left_is_counted_and_said():
    recorded = exchanges("hermes", 5000, 400)
    recorded[0] = replace(recorded[0], seconds=240.0, client_left=True)
    text = render(outcome(exchanges("boxmaker", 500, 40), recorded))
    assert ("Hermes closed its connection before the end of 1 answer (after 240 s); the proxy "
            "read it to its end, so its tokens are counted.") in text
    assert "Hermes processed 12,400 prompt tokens" in text
