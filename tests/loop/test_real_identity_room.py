"""Class: text the model writes (identity files through the memory tool, a compaction summary)
costs more tokens than loopd allowed for, and a session, every new session or loopd's start fails.

The property, with the real llama-server as judge (the router's qwen-tools, slots of 4,096
tokens, its own template and tokenizer counting the budget) and the real memoryd holding the
identity: whatever identity text the files hold (any script, within memoryd's character limits:
Adlam costs 4 tokens a character, Egyptian hieroglyphs 3, Devanagari about 1), whatever text the
model adds to memory.md through ``call_tool`` → ``memory``, on any ``baseline_budget``, and a
compaction summary as long as the model may write (cut by the server at the request's
``max_tokens``): the turn is answered; the next one, which compacts, is answered in its new
epoch; so is the one after a loopd restart; a new session is answered; and the start-up budget
check passes. The completions are scripted in front of the real server with its own token
counts as their usage (realistic_proxy.py); one the slot could not hold is rejected.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from bxcore.config import InferenceSection
from bxcore.config.inference import SamplingSection, SlotSection
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import memory as wire
from bxcore.protocol.loop import Turn
from bxcore.tools import ToolRequest, ToolResponse, plain_response
from faults.profile import LONG, fuzz_at_most, hang_guard, long_only
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from loopd.budget import BaselineBudget
from loopd.checks import budget_report
from loopd.epochs import Baselines, EpochSettings
from loopd.identity_writes import IdentityWrites
from loopd.inference import InferenceClient
from loopd.inference.budget import ServerTokens
from loopd.memory import MemoryLink
from loopd.sessions import Sessions
from loopd.store import SessionStore
from loopd.tools import ToolRunner, with_memory_tools
from loopd.turn import Loop, TurnSettings
from memoryd.layout import IDENTITY_LIMITS
from support.llama import LlamaServer, nonce

from .memoryd_process import Memoryd, running_memoryd
from .realistic_proxy import RealisticProxy
from .support import FIXED_TIME, Events, fake_registry, final_frame

pytestmark = pytest.mark.real_server

MODEL = "qwen-tools"
CONTEXT = 4096  # the router's per-slot context (serving/presets.ini: c 8192, np 2)
COMPACT_AT = int(0.75 * CONTEXT)
SUMMARY_TOKENS = 1024  # [loop] summary_tokens' default
LONG_EXAMPLES = 100

SCRIPTS = {  # letters only: what memoryd's sanitizer accepts in any language
    "adlam": st.characters(min_codepoint=0x1E900, max_codepoint=0x1E943, categories=["L"]),
    "hieroglyphs": st.characters(min_codepoint=0x13000, max_codepoint=0x1342E,
                                 categories=["L"]),
    "devanagari": st.characters(min_codepoint=0x0905, max_codepoint=0x0939, categories=["L"]),
    "english": st.sampled_from(list("etaoin shrdlu")),
}


def script_text(max_size: int) -> st.SearchStrategy[str]:
    """A run of 1 to ``max_size`` characters of one script: a short pattern repeated."""
    return st.tuples(st.sampled_from(list(SCRIPTS)).flatmap(
        lambda name: st.text(SCRIPTS[name], min_size=1, max_size=8)),
        st.integers(1, max_size)).map(lambda t: (t[0] * t[1])[: t[1]].strip() or "x")


identity = st.tuples(st.one_of(st.just(""), script_text(IDENTITY_LIMITS["memory.md"])),
                     st.one_of(st.just(""), script_text(IDENTITY_LIMITS["user.md"])))
added = st.one_of(st.none(), script_text(1000))
budgets = st.integers(1500, 3600)

ADLAM, HIEROGLYPH = "\U0001e900", "\U00013000"
WORDS = "The owner asked for the garden plan; it is done, and the next step is to water. " * 60


class MemorydPort:
    """brokerd's part for the memory tool: the call, decided auto, sent on to memoryd."""

    def __init__(self, memoryd: Memoryd):
        self._memoryd = memoryd

    async def call(self, request: ToolRequest, events: object) -> ToolResponse:
        if request.tool != "memory":
            return plain_response("failed", f"{request.tool} is not served in this test")
        body = wire.MemoryCall.model_validate(
            {"request": request, "class": "public", "untrusted": False})

        def ask() -> Frame:
            with contextlib.closing(SyncFrameSocket.connect(self._memoryd.socket,
                                                            wire.FROM_MEMORYD)) as sock:
                sock.write(Frame.of(wire.MEMORY_CALL, body, final=True))
                return sock.read(timeout=60)

        return ToolResponse.model_validate((await anyio.to_thread.run_sync(ask)).body)


@pytest.fixture(scope="module")
def memoryd() -> Iterator[Memoryd]:
    with tempfile.TemporaryDirectory(prefix="bx-idroom-") as tmp, \
            running_memoryd(Path(tmp)) as running:
        yield running


def steps(server: LlamaServer, memoryd: Memoryd, home: Path, budget: int,
          text: str | None, summary: str) -> tuple[list[str], bool, list[str]]:
    """The turns of one example; each final frame, whether an injected completion could not
    have fitted the slot, and the start-up budget check's report."""
    session, other = f"id-{secrets.token_hex(5)}", f"id-{secrets.token_hex(5)}"
    system = home / "system.md"
    system.write_text(f"{nonce()} You are terse.")

    async def run() -> tuple[list[str], bool, list[str]]:
        proxy = RealisticProxy(server.socket, model=MODEL, context=CONTEXT)
        section = InferenceSection(model=MODEL, max_tokens=2, retries=0, baseline_budget=budget,
                                   sampling=SamplingSection(temperature=0))
        outcomes: list[str] = []
        async with InferenceClient(section, transport=proxy) as client:
            registry = with_memory_tools(fake_registry())
            baselines = Baselines(
                system=system, tools=registry.core_schemas(), memory=MemoryLink(memoryd.socket),
                budget=BaselineBudget(counter=ServerTokens(client), limit=budget),
                opening_limit=COMPACT_AT)

            def sessions(compact_at: int) -> Sessions:  # a loopd start over the same store
                loop = Loop(inference=client, now=lambda: FIXED_TIME, settings=TurnSettings(),
                            tools=ToolRunner(registry, MemorydPort(memoryd),
                                             IdentityWrites(baselines)))
                return Sessions(store=SessionStore(home), loop=loop, new_baseline=baselines,
                                slots=SlotSection(), memory=baselines.memory,
                                epochs=EpochSettings(compact_at_tokens=compact_at,
                                                     summary_tokens=SUMMARY_TOKENS,
                                                     room_tokens=CONTEXT - COMPACT_AT))

            async def turn(served: Sessions, name: str, content: str, resume: bool) -> None:
                asked = Turn(session=name, content=content, resume=resume,
                             tool_choice=["none"] * 8)
                final = await final_frame(served.run(asked, Events()))
                outcomes.append(f"{final.kind} {final.body if final.kind != 'turn_done' else ''}")

            if text is not None:
                proxy.calls = [("call_tool", json.dumps({"name": "memory", "arguments": {
                    "action": "add", "file": "memory.md", "text": text}}, ensure_ascii=False))]
            await turn(sessions(COMPACT_AT), session, "Hello.", False)
            if proxy.impossible:
                return outcomes, True, []
            proxy.summary = summary
            await turn(sessions(1), session, "Say ok.", True)  # compacts first, whatever it holds
            await turn(sessions(COMPACT_AT), session, "Say ok again.", True)
            await turn(sessions(COMPACT_AT), other, "Hello.", False)
            report = await budget_report(client, baselines, identity_required=True)
        return outcomes, False, list(report.lines) if report.ok else ["FAIL", *report.lines]

    return anyio.run(run)


short_profile = (lambda test: test) if LONG else settings(
    max_examples=1, phases=[Phase.explicit], deadline=None,
    suppress_health_check=list(HealthCheck))


@long_only("7 min beside other work (each example several turns of 3,000-token prompts); "
           "tests/loop/test_baseline_budget.py checks the same rules offline in the short one")
@fuzz_at_most(LONG_EXAMPLES)
@hang_guard(LONG_EXAMPLES if LONG else 3, 900)
@short_profile
@given(files=identity, text=added, budget=budgets, summary=script_text(1500))
# The attack's F1: 700 Adlam characters added to an empty memory.md (2,822 tokens).
@example(files=("", ""), text=ADLAM * 700, budget=3000, summary=WORDS)
# F2 with a withheld file: a baseline of about 3,170 tokens (a budget above compact_at), a
# summary of 1,024 tokens, and a user.md of hieroglyphs (4,125 tokens) the budget cannot hold.
@example(files=(ADLAM * 700, HIEROGLYPH * 1375), text=None, budget=3500, summary=WORDS)
def test_identity_and_summaries_the_model_writes_leave_every_session_answering(
        llama_router, memoryd, files, text, budget, summary):
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in zip(("memory.md", "user.md"), files, strict=True):
            path = memoryd.home / "memory" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        outcomes, impossible, report = steps(llama_router, memoryd, Path(tmp), budget, text,
                                             summary)
    assume(not impossible)
    assert all(o.startswith("turn_done") for o in outcomes), (outcomes, llama_router.log()[-2000:])
    assert report and report[0] != "FAIL", report
