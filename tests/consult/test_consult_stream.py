"""The consult program's pure parts: the answer from a chat-completions event stream (fed
whole, byte by byte, and with bytes after [DONE]), its refusals, and its settings checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults.profile import fuzz
from hypothesis import given
from hypothesis import strategies as st
from toolkit.consult import StreamAnswer, payload
from toolkit.main import main
from toolkit.result import ToolError

from .support import recorded_answer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sse"
RECORDINGS = ["qwen_turn1.sse", "qwen_turn2.sse", "qwen_think_capped.sse"]


def answer_of(chunks: list[bytes], limit: int = 1 << 20) -> tuple[str, bool]:
    decoder = StreamAnswer(limit=limit)
    for chunk in chunks:
        decoder.feed(chunk)
    decoder.feed(b"")
    return decoder.result()


@pytest.mark.parametrize("name", RECORDINGS)
def test_a_recorded_stream_gives_the_same_answer_however_it_is_split(name):
    data = (FIXTURES / name).read_bytes()
    expected = recorded_answer(data)
    whole = answer_of([data])
    assert whole == (expected, False)
    assert answer_of([data[i:i + 1] for i in range(len(data))]) == whole
    assert answer_of([data, b"data: {\"choices\": [{\"delta\": {\"content\": \"late\"}}]}\n\n"]) \
        == whole  # nothing after [DONE] counts


def test_reasoning_is_not_part_of_the_answer():
    stream = (b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n\n'
              b'data: {"choices":[{"delta":{"content":"42"},"finish_reason":"stop"}]}\n\n'
              b": keep-alive\n\ndata: [DONE]\n\n")
    assert answer_of([stream]) == ("42", False)


def test_a_length_stop_is_marked_incomplete():
    stream = b'data: {"choices":[{"delta":{"content":"par"},"finish_reason":"length"}]}\n\n'
    text, cut = answer_of([stream])
    assert cut and text == "par\n[the endpoint stopped at its length limit]"


def test_an_answer_over_the_cap_is_marked_cut():
    stream = b"".join(b'data: {"choices":[{"delta":{"content":"abcdefgh"}}]}\n\n'
                      for _ in range(10)) + b"data: [DONE]\n\n"
    text, cut = answer_of([stream], limit=20)
    assert cut and text.startswith("abcdefgh")


@pytest.mark.parametrize(("stream", "message"), [
    (b'data: {"choices": [\n\n', "malformed event"),
    (b"data: [1, 2]\n\n", "not an object"),
    (b'data: {"error": {"message": "quota exceeded"}}\n\n', "reported an error"),
    (b'data: {"choices": [{"message": "x"}]}\n\n', "choice without a delta"),
    (b'data: {"choices":[{"delta":{"content":"half an ans"}}]}\n\n', "ended before the answer"),
    (b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
     "finished without answer text"),
    (b": only a keep-alive\n\n", "ended before the answer"),
])
def test_a_bad_stream_is_a_clear_tool_error(stream, message):
    with pytest.raises(ToolError, match=message):
        answer_of([stream])


def test_feeding_after_the_end_is_refused():
    decoder = StreamAnswer(limit=100)
    decoder.feed(b"")
    with pytest.raises(ToolError, match="after it ended"):
        decoder.feed(b"data: x\n")


@fuzz
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_any_bytes_give_an_answer_or_a_tool_error(chunks):
    try:
        text, cut = answer_of(chunks)
    except ToolError:
        return
    assert isinstance(text, str) and isinstance(cut, bool)


def test_the_payload_is_the_allowlist_and_the_settings_only():
    settings = {"endpoint": "http://x/v1/chat/completions", "model": "m", "temperature": 0.2,
                "max_tokens": 64, "api_key_secret": "k", "first_byte_timeout": 9,
                "liveness_timeout": 3}
    body = payload(settings, {"question": "Q?", "attachments": ["a"]})
    assert body == {"model": "m", "temperature": 0.2, "stream": True, "max_tokens": 64,
                    "messages": [{"role": "user",
                                  "content": "Q?\n\n<attachment 1>\na\n</attachment 1>"}]}


def bx_tool(capsys, arguments: dict, *options: str) -> tuple[int, dict]:
    status = main(["consult", *options, json.dumps(arguments)])
    return status, json.loads(capsys.readouterr().out)


def test_without_settings_or_a_network_grant_consult_says_what_is_missing(capsys):
    status, out = bx_tool(capsys, {"question": "q"}, "--class", "public")
    assert status == 1 and "settings: 'endpoint' is missing" in out["error"]
    settings = ('{"endpoint": "http://x/", "model": "m", "temperature": 0.6, '
                '"first_byte_timeout": 5, "liveness_timeout": 5}')
    status, out = bx_tool(capsys, {"question": "q"}, "--settings", settings)
    assert status == 1 and "needs its grant to name the endpoint's host" in out["error"]
    status, out = bx_tool(capsys, {"question": "q", "history": []}, "--settings", settings)
    assert status == 2 and "unknown field 'history'" in out["error"]
    assert bx_tool(capsys, {"question": "q"}, "--settings", "[]")[0] == 2


def test_docs_egress_lists_the_endpoint_and_every_field_of_the_egress_log():
    from brokerd.egresslog import EgressRecord

    text = (Path(__file__).resolve().parents[2] / "docs" / "egress.md").read_text()
    assert "| The consult endpoint (`[consult] endpoint`" in text
    section = text.split("## The consult egress log", 1)[1]
    named = {name.strip("` ") for row in section.splitlines() if row.startswith("| `")
             for name in row.split("|")[1].split(",")}
    assert named == set(EgressRecord.model_fields)
