"""readback.py, in process: what passes untouched, what is replaced, and that the replacement is
one fixed, readable object (the real server judges the same in test_real_readback.py)."""

from __future__ import annotations

import json

import pytest
from bxcore.chat import FunctionCall, ToolCall
from bxcore.records import Assistant
from hypothesis import given
from hypothesis import strategies as st
from loopd.inference.chunks import BadStream, parse_chunk
from loopd.readback import DROPPED_KEY, MAX_DEPTH, arguments_problem, readable_arguments
from loopd.replay import replay

# Numbers the server writes back as they are: int64, and doubles of 6 significant digits.
shown_as_they_are = (st.integers(-2**63, 2**63 - 1)
                     | st.floats(allow_nan=False, allow_infinity=False).map(
                         lambda x: float(f"{x:.6g}")))
json_object = st.dictionaries(
    st.text(), st.recursive(st.none() | st.booleans() | shown_as_they_are | st.text(),
                            lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(), inner, max_size=3), max_leaves=10))


@given(value=json_object, ensure_ascii=st.booleans(), indent=st.none() | st.integers(0, 2))
def test_a_json_object_passes_through_as_the_same_text(value, ensure_ascii, indent):
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    assert arguments_problem(text) is None
    assert readable_arguments(text) is text


@given(text=st.text(max_size=200) | st.binary(max_size=60).map(
    lambda b: b.decode("utf-8", "surrogateescape")))
def test_anything_else_becomes_one_fixed_object_a_strict_parser_reads(text):
    replaced = readable_arguments(text)
    assert replaced == readable_arguments(text)  # the same bytes every request
    if arguments_problem(text) is None:
        assert replaced is text
        return
    value = json.loads(replaced)
    assert list(value) == [DROPPED_KEY] and value[DROPPED_KEY]["characters"] == len(text)
    replaced.encode("ascii")  # nothing a strict parser or any channel could refuse
    assert arguments_problem(replaced) is None


@pytest.mark.parametrize(("text", "reason"), [
    ("{", "Expecting property name enclosed in double quotes at offset 1"),
    ('{"path": "/x/\\ud800"}', "a lone surrogate escape (\\ud800 at offset 13)"),
    ('{"p": "\\ud83d\\ude00 \\udc00"}', "(\\udc00 at offset 20)"),
    ('{"a": NaN}', "NaN is not a JSON number"),
    ('{"a": 1e999}', "a number too large for a double"),
    ('{"a": "\x00"}', "Invalid control character at offset 7"),
    ('{"a": 1} x', "Extra data at offset 9"),
    ("\ufeff{}", "a byte-order mark"),
    ("[1]", "a JSON array, not an object"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    ('{"a":' * 5000 + "1" + "}" * 5000, f"nested deeper than {MAX_DEPTH} levels"),
    ("\ud800", "a lone surrogate character at offset 0"),
    # the third attack on issue 32: numbers the server writes back as others
    ('{"n": 9223372036854775808}', "shown back to you as -9223372036854775808"),
    ('{"n": 18446744073709551615}', "shown back to you as -1"),
    ('{"n": -9223372036854775809}', "shown back to you as -9.22337e+18"),
    ('{"n": 1234567.89}', "shown back to you as 1.23457e+06"),
    ('{"n": [0.30000000000000004]}', "shown back to you as 0.3"),
])
def test_the_reason_says_what_and_where(text, reason):
    problem = arguments_problem(text)
    assert problem is not None and reason in problem


def test_a_surrogate_pair_and_deep_but_allowed_nesting_pass():
    assert arguments_problem('{"p": "\\ud83d\\ude00"}') is None
    for same in ("9223372036854775807", "-9223372036854775808", "1e20", "100000000000000000000",
                 "2.0", "0.1", "-0.0", "1e-07"):  # written back as the same value
        assert arguments_problem(f'{{"n": {same}}}') is None, same
    depth = MAX_DEPTH - 1
    assert arguments_problem('{"a":' + "[" * depth + "]" * depth + "}") is None


def test_replay_sends_the_readable_form_and_leaves_the_record_as_emitted():
    calls = [ToolCall(id="c1", function=FunctionCall(name="clock", arguments="{}")),
             ToolCall(id="c2", function=FunctionCall(name="fs.read", arguments="{"))]
    record = Assistant(time="2026-12-03T00:00:00Z", content=None, reasoning_content=None,
                       tool_calls=calls)
    message = replay(record)
    assert message is not None and message.tool_calls is not None
    kept, replaced = message.tool_calls
    assert kept is calls[0]
    assert replaced.function.arguments == readable_arguments("{") != "{"
    assert replaced.id == "c2" and replaced.function.name == "fs.read"
    assert record.tool_calls is not None and record.tool_calls[1].function.arguments == "{"


def test_a_chunk_with_a_lone_surrogate_escape_is_a_bad_stream():
    chunk = ('{"choices":[{"index":0,"finish_reason":null,"delta":{"content":"\\ud800"}}],'
             '"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}')
    with pytest.raises(BadStream, match="lone surrogate"):
        parse_chunk(chunk)
    parse_chunk(chunk.replace("\\ud800", "\\ud83d\\ude00"))  # a pair is text


@pytest.mark.parametrize("reasoning", [None, "thinking, cut off"])
def test_a_completion_with_neither_content_nor_calls_goes_with_empty_content(reasoning):
    record = Assistant(time="2026-12-03T00:00:00Z", content=None, reasoning_content=reasoning,
                       tool_calls=None)
    message = replay(record)
    assert message is not None and message.content == "" and message.tool_calls is None
    assert message.reasoning_content == reasoning
