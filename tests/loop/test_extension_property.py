"""The inference contract's append-only rule, as a property over generated conversations.

Each conversation (user texts, completions with and without tool calls, tool results over the
cap, restarts of loopd between turns, compactions before turns) is driven through the loop and
the real inference client against a caching fake server. Within an epoch, for every consecutive
pair of request bodies the server got, the later message array starts with the earlier one (as
JSON values), and ``tools`` and the first message never change; the compaction request is one
such extension. A new epoch's requests are strict extensions of its own first one, which is the
system message, the summary, and the turn's user message. No log has a CacheLoss. Hypothesis
prints the failing conversation.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from bxcore.config.inference import InferenceSection, SlotSection
from bxcore.protocol.loop import Turn
from bxcore.records import ToolResult
from hypothesis import given
from hypothesis import strategies as st
from loopd.baseline import SUMMARY_HEADING
from loopd.epochs import EpochSettings
from loopd.inference.client import InferenceClient
from loopd.log import parse_log
from loopd.sessions import Sessions
from loopd.store import SessionStore
from loopd.tools import Registry, ToolRunner
from loopd.turn import Loop, TurnSettings
from support.fake_tools import FakeTools
from support.scratch import scratch_dir

from .caching_server import CachingServer, Planned
from .support import FIXED_TIME, Events, final_frame, fixed_baselines

CAP = 200

short_text = st.text(max_size=30)
tool_call = st.one_of(
    st.just(("clock", "{}")),
    st.builds(lambda q: ("find_tool", json.dumps({"query": q})), st.sampled_from(["echo", "x"])),
    st.builds(
        lambda text: ("call_tool", json.dumps({"name": "echo", "arguments": {"text": text}})),
        st.one_of(short_text, st.text(min_size=CAP - 20, max_size=CAP * 2)),
    ),
    st.builds(lambda n: ("call_tool", json.dumps({"name": n, "arguments": {}})),
              st.sampled_from(["nope", "clock"])),
)
reasoning = st.none() | st.text(min_size=1, max_size=20)
tool_round = st.builds(lambda calls, r: Planned(tool_calls=tuple(calls), reasoning=r),
                       st.lists(tool_call, min_size=1, max_size=2), reasoning)
turn_plan = st.tuples(
    short_text,  # the user's text
    st.lists(tool_round, max_size=3),  # rounds of tool calls before the answer
    st.builds(lambda text, r: Planned(content=text, reasoning=r),
              st.text(min_size=1, max_size=30), reasoning),
    st.booleans(),  # restart loopd before this turn
    st.booleans(),  # compact before this turn (if the session has a completion)
)


def loop_server(home, server: CachingServer) -> tuple[Sessions, InferenceClient]:
    section = InferenceSection(retries=0)
    client = InferenceClient(section, transport=server.transport())
    registry = Registry(FakeTools.schemas)
    loop = Loop(
        inference=client, tools=ToolRunner(registry, FakeTools(now=lambda: FIXED_TIME)),
        settings=TurnSettings(tool_iterations=3, tool_result_cap=CAP), now=lambda: FIXED_TIME,
    )
    store = SessionStore(home)
    return Sessions(store=store, loop=loop, new_baseline=fixed_baselines,
                      slots=SlotSection()), client


async def converse(home, plans) -> CachingServer:
    server = CachingServer()
    loop, client = loop_server(home, server)
    try:
        for number, (text, rounds, answer, restart, compact) in enumerate(plans):
            if restart:
                await client.aclose()
                loop, client = loop_server(home, server)
            loop.epochs = EpochSettings(compact_at_tokens=1 if compact else None)
            server.script = [*rounds, answer]
            final = await final_frame(loop.run(
                Turn(session="prop", content=text, resume=number > 0), Events()
            ))
            assert final.kind == "turn_done" or final.body["code"] == "turn_limit", final.body
    finally:
        await client.aclose()
    return server


def opening(body: dict) -> list[dict]:
    """What every request of one epoch starts with: the system message, and from the second
    epoch on the compaction summary after it."""
    messages = body["messages"]
    summary = len(messages) > 1 and str(messages[1].get("content")).startswith(SUMMARY_HEADING)
    return messages[:2] if summary else messages[:1]


def epochs_of(bodies: list[dict]) -> list[list[dict]]:
    """Consecutive requests grouped by the epoch they belong to."""
    return [list(group) for _, group in itertools.groupby(bodies, key=opening)]


@given(st.lists(turn_plan, min_size=1, max_size=4))
def test_every_request_extends_the_one_before(plans):
    with scratch_dir() as home:  # in memory: the logs' fsyncs were most of an example
        check_extensions(home, plans)


def check_extensions(home, plans) -> None:
    server = asyncio.run(converse(home, plans))
    assert server.bodies
    groups = epochs_of(server.bodies)
    store = SessionStore(home)
    current = store.open("prop")
    assert len(groups) == current.epoch + 1
    for epoch, bodies in enumerate(groups):
        if epoch > 0:
            opening = bodies[0]["messages"]
            assert [m["role"] for m in opening] == ["system", "user", "user"]
            assert opening[1]["content"].startswith(SUMMARY_HEADING)
        for earlier, later in itertools.pairwise(bodies):
            assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
            assert later["tools"] == earlier["tools"]
            assert later["messages"][0] == earlier["messages"][0]
            # Key order too: the server renders JSON as sent, so a reordered key is another
            # prompt.
            assert json.dumps(later["tools"]) == json.dumps(earlier["tools"])
            prefix = later["messages"][: len(earlier["messages"])]
            assert json.dumps(prefix) == json.dumps(earlier["messages"])
    directory = home / "sessions" / "prop"
    for epoch in range(current.epoch + 1):
        log = directory / f"{epoch}.jsonl"
        records = parse_log(log.read_bytes(), str(log), session="prop", epoch=epoch)
        assert "cache_loss" not in [r.type for r in records]
        assert all(len(r.content.encode()) <= CAP for r in records if isinstance(r, ToolResult))
        assert (records[-1].type == "epoch_end") == (epoch < current.epoch)
