"""The baseline (003): assembly, JSON round trip, hash, load errors; and messages()."""

from __future__ import annotations

import pytest
from bxcore.chat import (
    AssistantMessage,
    FunctionCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    message_json,
)
from bxcore.records import (
    Assistant,
    CacheLoss,
    EpochEnd,
    SessionStart,
    ToolResult,
    Usage,
    User,
)
from bxcore.util import sha256
from hypothesis import given
from hypothesis import strategies as st
from loopd.baseline import SUMMARY_HEADING, Baseline, read_identity_files
from loopd.errors import BaselineError
from loopd.replay import messages

from .support import FIXED_TIME, fake_registry

T = FIXED_TIME


def test_assemble_trims_the_system_text_and_appends_the_identity_after_a_blank_line(tmp_path):
    system = tmp_path / "system.md"
    system.write_text("Be brief.\n\n  \n")
    tools = fake_registry().core_schemas()
    baseline = Baseline.assemble(system=system, identity="\n## soul.md\nAda's.  \n", tools=tools)
    assert baseline.system == "Be brief.\n\n## soul.md\nAda's."
    assert [t.name for t in baseline.tools] == ["clock", "find_tool", "call_tool"]
    assert baseline.summary is None


def test_identity_files_mode_reads_core_md_trimmed(tmp_path):
    core = tmp_path / "memory" / "core.md"
    core.parent.mkdir()
    core.write_text("\n  The owner is Ada.  \n\n")
    identity = read_identity_files([core, tmp_path / "missing.md"])
    assert identity.text == "The owner is Ada."
    assert [(part.name, part.text) for part in identity.files] == [("core.md", "The owner is Ada.")]


@pytest.mark.parametrize("core_text", [None, "", "  \n\t\n"])
def test_a_missing_or_blank_identity_adds_nothing(tmp_path, core_text):
    system = tmp_path / "system.md"
    system.write_text("Be brief.")
    core = tmp_path / "core.md"
    if core_text is not None:
        core.write_text(core_text)
    identity = read_identity_files([core]).text
    assert Baseline.assemble(system=system, identity=identity, tools=[]).system == "Be brief."


def test_a_missing_system_md_names_the_file(tmp_path):
    with pytest.raises(BaselineError, match=r"system\.md: cannot read"):
        Baseline.assemble(system=tmp_path / "system.md", identity="", tools=[])


def test_a_first_epoch_baseline_file_has_no_summary_key():
    """Epoch-0 files keep the bytes they had before compaction existed."""
    assert b"summary" not in Baseline(system="S", tools=[]).to_json()


def test_the_summary_opens_the_epoch_as_a_user_message_after_the_system_message():
    baseline = Baseline(system="S", tools=[], summary="We fixed the CI.")
    assert Baseline.from_json(baseline.to_json()) == baseline
    replayed = messages(baseline, [User(time=T, content="next")])
    assert replayed[0] == SystemMessage(content="S")
    assert replayed[1] == UserMessage(content=f"{SUMMARY_HEADING}\n\nWe fixed the CI.")
    assert replayed[2] == UserMessage(content="next")


def test_json_round_trip_and_hash():
    baseline = Baseline(system="S", tools=fake_registry().core_schemas())
    data = baseline.to_json()
    assert Baseline.from_json(data) == baseline
    assert baseline.hash() == sha256(data)
    assert data.startswith(b'{"system":"S","tools":[{"core":true,"description":')


def test_load_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "0.baseline.json"
    path.write_text('{"system": "S", "tools": [], "extra": 1}')
    with pytest.raises(BaselineError, match=r"0\.baseline\.json: not a baseline: extra"):
        Baseline.load(path)
    with pytest.raises(BaselineError, match="cannot read"):
        Baseline.load(tmp_path / "missing.json")


CALL = ToolCall(id="c1", function=FunctionCall(name="clock", arguments="{}"))


def test_messages_replays_every_record_variant():
    records = [
        SessionStart(time=T, session="s", epoch=0, slot=0, baseline="sha256:0"),
        User(time=T, content="hi"),
        Assistant(time=T, content=None, reasoning_content="think", tool_calls=[CALL]),
        Usage(time=T, cache_n=1, prompt_n=2, predicted_n=3, reasoning_tokens=1,
              thinking_capped=False),
        ToolResult.model_validate({"time": T, "call": 1, "tool_call_id": "c1", "content": "now",
                                   "class": "public", "untrusted": False, "truncated": False}),
        CacheLoss(time=T, expected=10, got=1),
        Assistant(time=T, content="It is now.", reasoning_content=None, tool_calls=None),
        EpochEnd(time=T, next_epoch=1),
    ]
    assert messages(Baseline(system="S", tools=[]), records) == [
        SystemMessage(content="S"),
        UserMessage(content="hi"),
        AssistantMessage(content=None, reasoning_content="think", tool_calls=[CALL]),
        ToolMessage(tool_call_id="c1", content="now"),
        AssistantMessage(content="It is now.", reasoning_content=None, tool_calls=None),
    ]


text = st.text(max_size=40)
records = st.one_of(
    st.builds(lambda c: User(time=T, content=c), text),
    st.builds(
        lambda c, r, n: Assistant(
            time=T, content=c, reasoning_content=r,
            tool_calls=[ToolCall(id=f"c{i}", function=FunctionCall(name="clock", arguments="{}"))
                        for i in range(n)] or None,
        ),
        st.none() | text, st.none() | text, st.integers(0, 3),
    ),
    st.builds(
        lambda c, cut: ToolResult.model_validate(
            {"time": T, "call": 1, "tool_call_id": "c0", "content": c, "class": "public",
             "untrusted": False, "truncated": cut}
        ),
        text, st.booleans(),
    ),
    st.builds(lambda n: Usage(time=T, cache_n=n, prompt_n=n, predicted_n=n, reasoning_tokens=0,
                              thinking_capped=False), st.integers(0, 10)),
    st.builds(lambda n: CacheLoss(time=T, expected=n, got=0), st.integers(0, 10)),
)


@given(st.lists(records, max_size=30), text)
def test_replay_of_a_prefix_is_a_prefix(log, system):
    """The same extension property as the requests, on messages() alone: each record only
    ever adds at the end, compared as JSON values."""
    baseline = Baseline(system=system, tools=fake_registry().core_schemas())
    previous = None
    for end in range(len(log) + 1):
        current = [message_json(m) for m in messages(baseline, log[:end])]
        if previous is not None:
            assert current[: len(previous)] == previous
        assert current[0] == {"role": "system", "content": system}
        previous = current
