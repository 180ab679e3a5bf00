"""The baseline budget judged by the real llama-server (the router's qwen-tools: its own chat
template and tokenizer), for baselines built as loopd builds every one (``Baselines``, identity
files on disk, the toolkit-less core tools).

Property, over generated identity file sizes: a baseline is refused exactly when the server's
count of it (``/apply-template`` then ``/tokenize``) is over the budget, and the refusal's figure
for the system prompt and each identity file is the server's own count of that text.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from bxcore.config import InferenceSection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopd.budget import BaselineBudget
from loopd.checks import budget_report
from loopd.epochs import Baselines
from loopd.errors import BaselineOverBudget
from loopd.inference import InferenceClient
from loopd.inference.budget import ServerTokens
from loopd.memory import IdentityFiles
from loopd.tools import Registry
from support.fake_tools import FakeTools

pytestmark = [pytest.mark.real_server, pytest.mark.anyio]

SYSTEM = "You are a careful assistant. Answer briefly."
FILES = ("soul.md", "memory.md", "user.md")
WORDS = st.sampled_from(["owner", "Ada", "prefers", "tea", "naïve", "日本", "CI", "42", "—"])


@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.tuples(*(st.lists(WORDS, max_size=400).map(" ".join) for _ in FILES)),
       room=st.integers(-300, 300))
async def test_a_baseline_is_refused_exactly_when_the_servers_count_is_over(
    llama_router_proxy, texts, room
):
    client = InferenceClient(InferenceSection(model="qwen-tools"), socket=llama_router_proxy)
    tokens = ServerTokens(client)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            (home / "system.md").write_text(SYSTEM)
            for name, text in zip(FILES, texts, strict=True):
                (home / name).write_text(text)
            built = Baselines(system=home / "system.md", tools=Registry(FakeTools.schemas)
                              .core_schemas(), memory=IdentityFiles([home / n for n in FILES]))
            baseline, identity = await built.build("s1", 0, None)
            total = await tokens.baseline(baseline.system, tuple(baseline.tools))
            limit = max(1, total + room)
            checked = Baselines(system=built.system, tools=built.tools, memory=built.memory,
                                budget=BaselineBudget(counter=tokens, limit=limit))
            if total <= limit:
                assert await checked("s1", 0, None) == baseline
                return
            with pytest.raises(BaselineOverBudget) as refused:
                await checked("s1", 0, None)
            message = str(refused.value)
            assert f"the baseline is {total:,} tokens, over [inference] baseline_budget = " \
                f"{limit:,}" in message
            assert f"system prompt {await tokens.text(SYSTEM):,} tokens" in message
            parts = message.split("tokenizer: ")[1]
            for part in identity.files:
                figure = re.search(rf"{re.escape(part.name)} ([\d,]+) tokens", parts)
                assert figure and figure[1] == f"{await tokens.text(part.text):,}", parts
    finally:
        await client.aclose()


async def test_loopd_budget_over_the_budget_names_each_part(llama_router_proxy, tmp_path):
    """``loopd budget`` (and serve's start-up check) says what each part costs, as a refused
    session is told."""
    (tmp_path / "system.md").write_text(SYSTEM)
    (tmp_path / "soul.md").write_text("I am calm. " * 40)
    client = InferenceClient(InferenceSection(model="qwen-tools", baseline_budget=50),
                             socket=llama_router_proxy)
    built = Baselines(system=tmp_path / "system.md", tools=Registry(FakeTools.schemas)
                      .core_schemas(), memory=IdentityFiles([tmp_path / "soul.md"]))
    try:
        report = await budget_report(client, built, identity_required=True)
    finally:
        await client.aclose()
    assert not report.ok
    assert report.lines[0].startswith("FAIL baseline_budget: baseline: ")
    assert "over [inference] baseline_budget = 50" in report.lines[1]
    assert re.search(r"system prompt \d+ tokens.*tools \d+ tokens \(3 schemas\); soul\.md \d+ "
                     r"tokens \(439 characters\)", report.lines[1]), report.lines
