"""Class: one turn takes the session past its slot, and every later turn is refused.

The property, with the real llama-server as judge (the router's qwen-tools, slots of 4,096
tokens): whatever one completion holds (tool names and find_tool queries of any length, which
loopd's own answers used to echo whole; call_tool arguments of any size, echoed back by a tool
up to the result cap; numbers the server's template re-renders at up to twice their generated
tokens, subnormal and large floats; several such calls at once) and whatever the tools return
within their cap, the session's next plain turn is answered, or ends session_full and the one
after it is answered; that one runs after a loopd restart (the sessions built again over the
same store), so what makes compaction due survives it. loopd compacts before a turn whose
request could outgrow the slot, counting what was appended after the last completion (and after
a request the slot refused), and compaction's own request shrinks until the slot holds it
(replay.fitting_views).

The hostile completion comes from a proxy in front of the real server, as in
test_real_readback.py; its usage is what the real server would report: the prompt counted by
the server's template and tokenizer, the completion's text by its tokenizer. A completion the
slot could not have held is not one a model can emit, and is rejected as an example.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import anyio
import pytest
from bxcore.config import InferenceSection
from bxcore.config.inference import SamplingSection, SlotSection
from bxcore.protocol.loop import Turn
from faults.profile import LONG, by_profile, fuzz_at_most, hang_guard
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from loopd.baseline import Baseline
from loopd.epochs import EpochSettings
from loopd.inference import InferenceClient
from loopd.sessions import Sessions
from loopd.store import SessionStore
from support.llama import LlamaServer, nonce

from .realistic_proxy import RealisticProxy
from .support import Events, fake_registry, final_frame, make_loop

pytestmark = pytest.mark.real_server

MODEL = "qwen-tools"
CONTEXT = 4096  # the router's per-slot context (serving/presets.ini: c 8192, np 2)
EPOCHS = EpochSettings(compact_at_tokens=int(0.75 * CONTEXT), summary_tokens=48,
                       room_tokens=CONTEXT - int(0.75 * CONTEXT))
LONG_EXAMPLES = 200
EXAMPLES = by_profile(short=1, long=LONG_EXAMPLES)

long_text = st.tuples(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]),
                              min_size=1, max_size=6), st.integers(1, 2000)).map(
    lambda t: (t[0] * t[1])[: t[1] * 2])
a_call = st.one_of(
    long_text.map(lambda name: (name, "{}")),  # an unknown tool, echoed by name
    long_text.map(lambda q: ("find_tool", json.dumps({"query": q}))),
    long_text.map(lambda text: ("call_tool", json.dumps(
        {"name": "echo", "arguments": {"text": text}}))),  # the tool gives it back, capped
    long_text.map(lambda name: ("call_tool", json.dumps({"name": name, "arguments": {}}))),
    # numbers the server re-renders longer than generated (tojson: 5e-324 as 4.94066e-324)
    st.lists(st.one_of(st.sampled_from([5e-324, 2.2250738585072014e-308, 1e9, 1e-7, 1e15,
                                        1.7976931348623157e308, 0.123456789]),
                       st.floats(allow_nan=False, allow_infinity=False)),
             min_size=1, max_size=400).map(
        lambda numbers: ("find_tool", json.dumps({"query": numbers}))),
)
hostile = st.tuples(st.lists(a_call, min_size=1, max_size=4), st.integers(0, 2500))


async def _baseline(session: str, epoch: int, summary: str | None) -> Baseline:
    return Baseline(system=f"{nonce()} You are terse.", tools=fake_registry().core_schemas(),
                    summary=summary)


def turns(home: Path, server: LlamaServer, session: str,
          plan: list[tuple[str, bool, list[tuple[str, str]] | None]]) -> tuple[list[str], bool]:
    """Run the plan's turns (content, resume, injected calls) on sessions built afresh, as a
    loopd start builds them; each turn's final frame kind (and error), and whether an
    injected completion could not have fitted the slot."""
    async def run() -> tuple[list[str], bool]:
        proxy = RealisticProxy(server.socket, model=MODEL, context=CONTEXT)
        section = InferenceSection(model=MODEL, max_tokens=2, retries=0,
                                   sampling=SamplingSection(temperature=0))
        outcomes = []
        async with InferenceClient(section, transport=proxy) as client:
            sessions = Sessions(store=SessionStore(home), loop=make_loop(client),
                                new_baseline=_baseline, slots=SlotSection(), epochs=EPOCHS)
            for content, resume, calls in plan:
                proxy.calls = calls
                asked = Turn(session=session, content=content, resume=resume,
                             tool_choice=["none"] * 8)
                final = await final_frame(sessions.run(asked, Events()))
                outcomes.append(f"{final.kind} {final.body if final.kind != 'turn_done' else ''}")
                if proxy.impossible:
                    break
        return outcomes, proxy.impossible
    return anyio.run(run)


short_profile = (lambda test: test) if LONG else settings(
    max_examples=EXAMPLES, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.filter_too_much])

# The attack's shapes: two find_tool queries of 3,000 characters; three unknown names of 5,000;
# 290 subnormal floats, replayed at twice their generated tokens (attack 32b, F3).
FOUND = [("find_tool", json.dumps({"query": "sea poem " * 333})) for _ in range(2)]
SUBNORMALS = [("find_tool", json.dumps({"query": [5e-324] * 290}))]
NAMES = [("x" * 5000, "{}") for _ in range(3)]


@fuzz_at_most(LONG_EXAMPLES)
@hang_guard(EXAMPLES + 2, 600)
@short_profile
@given(case=hostile)
@example(case=(FOUND, 0))
@example(case=(SUBNORMALS, 0))
@example(case=([("call_tool", json.dumps({"name": "echo", "arguments": {"text": "é<|" * 300}}))]
               * 3, 1200))
def test_after_any_completion_the_next_plain_turn_fits_the_slot(llama_router, tmp_path, case):
    calls, filler = case
    home, session = tmp_path / secrets.token_hex(4), f"room-{secrets.token_hex(6)}"
    first = "Hello. " + "words " * filler
    outcomes, impossible = turns(
        home, llama_router, session, [(first, False, calls), ("Say ok.", True, None)])
    assume(not impossible)
    # The turn the server finds over the slot (it renders the log longer than the usage said)
    # may end session_full; the next one, here after a restart, is answered.
    assert outcomes[1].startswith(("turn_done", "error {'code': 'session_full'")), (
        outcomes, llama_router.log())
    (after_restart,), _ = turns(home, llama_router, session, [("Say ok again.", True, None)])
    assert after_restart.startswith("turn_done"), (outcomes, after_restart, llama_router.log())


def test_the_attacks_long_names_fit_too(llama_router, tmp_path):
    """Three unknown tools named by 5,000 characters each (the attack's #13): over the slot as
    the completion itself would be, so the realistic case is the one that fits: one of them."""
    session = f"room-{secrets.token_hex(6)}"
    outcomes, impossible = turns(tmp_path, llama_router, session,
                                 [("Hello.", False, NAMES[:1]), ("Say ok.", True, None)])
    assert not impossible
    assert outcomes[1].startswith("turn_done"), (outcomes, llama_router.log())
