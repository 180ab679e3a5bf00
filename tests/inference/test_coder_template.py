"""The `coder` preset's template (serving/templates/qwen2.5-fenced-json-tools.jinja), rendered by
the pinned llama-server itself (``/apply-template``). The 1.5B model it is for is not fetched
for tests; the template does not depend on the model, so the smallest model serves.

- A call already made is shown as a json block inside <tool_call> tags, the form Qwen2.5 was
  trained on (docs/decisions/small-local-models.md).
- Each request of a turn extends the one before byte for byte up to the generation prompt:
  wrapping past calls must not make a message render one way while it is new and another once
  more follow (docs/design.md, "Append-only requests").
"""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from support.llama import SMOL, require_llama, start_single

TEMPLATE = "qwen2.5-fenced-json-tools.jinja"
GENERATION_PROMPT = "<|im_start|>assistant\n"
TOOLS = [{"type": "function", "function": {
    "name": "find_tool", "description": "Find a tool.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]


def call(number: int, name: str, arguments: dict[str, object]) -> dict[str, object]:
    return {"id": f"c{number}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


TURN = [
    {"role": "system", "content": "You are Boxmaker."},
    {"role": "user", "content": "What is the code word in my note /home/o/notes/plan.md?"},
    {"role": "assistant", "content": "", "tool_calls": [call(1, "find_tool", {"query": "read"})]},
    {"role": "tool", "tool_call_id": "c1", "content": '[{"name": "fs.read"}]'},
    {"role": "assistant", "content": "", "tool_calls": [
        call(2, "call_tool", {"name": "fs.read", "arguments": {"path": "/home/o/notes/plan.md"}})]},
    {"role": "tool", "tool_call_id": "c2", "content": "The code word is PERIWINKLE-4471."},
]
REQUESTS = (2, 4, 6)  # a turn's requests end with the user's message or a tool's result


@pytest.fixture(scope="module")
def server():
    require_llama()
    with start_single(SMOL, TEMPLATE) as running:
        yield running


def render(server, messages: list[dict[str, object]]) -> str:
    response = server.post("/apply-template", {"messages": messages, "tools": TOOLS})
    assert response.status_code == 200, response.text
    return response.json()["prompt"]


@pytest.mark.real_server
def test_a_call_already_made_is_a_json_block_inside_tool_call_tags(server):
    prompt = render(server, TURN)
    assert (
        '<|im_start|>assistant\n<tool_call>\n```json\n{"name": "call_tool", "arguments": '
        '{"name": "fs.read", "arguments": {"path": "/home/o/notes/plan.md"}}}\n```\n'
        "</tool_call><|im_end|>\n"
    ) in prompt
    assert prompt.count("<tool_call>\n```json\n") == 2
    assert prompt.endswith(
        "<tool_response>\nThe code word is PERIWINKLE-4471.\n</tool_response><|im_end|>\n"
        + GENERATION_PROMPT
    )


@pytest.mark.real_server
def test_every_request_of_a_turn_extends_the_one_before(server):
    prompts = [render(server, TURN[:end]) for end in REQUESTS]
    for earlier, later in pairwise(prompts):
        assert earlier.endswith(GENERATION_PROMPT)
        assert later.startswith(earlier.removesuffix(GENERATION_PROMPT))
