"""Class: a number in a tool call's arguments that the real server cannot read back as it is.

llama-server parses each past call's arguments with nlohmann::json before it renders them
(docs/decisions/replay-what-the-server-reads.md): an integer past 64 bits is read with strtod,
and any number that comes out infinite is HTTP 500 "number overflow". What it reads, its
template engine writes back: integers within int64 as they are, from 2^63 to 2^64 - 1 wrapped
negative, other numbers to 6 significant digits (the third attack on issue 32). The property:
for every number text (integers of any length, the edge of a double's range, long fractions,
exponents large, small and long; fractions of few digits), in any place of an arguments
object, the real server renders the arguments, each number the same value as sent, exactly
when ``arguments_problem`` says it can (None). Rendering is the server's ``/apply-template``,
the same code a chat request runs first; no generation, so examples are cheap.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from faults.profile import LONG, by_profile, fuzz_at_most, hang_guard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopd.readback import arguments_problem
from support.llama import LlamaServer

pytestmark = pytest.mark.real_server

MODEL = "qwen-tools"
LONG_EXAMPLES = 1000
EXAMPLES = by_profile(short=60, long=LONG_EXAMPLES)
# The largest double as an integer, and the first integer strtod rounds to infinity.
DBL_MAX = int(sys.float_info.max)
OVERFLOWS_AT = 2**1024 - 2**970
EDGES = [str(n) for n in (DBL_MAX, DBL_MAX + 1, OVERFLOWS_AT - 1, OVERFLOWS_AT,
                          OVERFLOWS_AT + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1,
                          -2**63, -2**63 - 1, 10**20, 10**308, 10**309)]
MANTISSAS = ["17976931348623157", "17976931348623158", "17976931348623159", "1", "9", "0",
             "4940656458412465", "2225073858507201"]


@st.composite
def number_text(draw: st.DrawFn) -> str:
    """JSON number text, biased to where a double runs out: 300 to 320 digits, the exact edge
    of strtod's overflow, 4,300 digits and past (Python's int() limit), long fractions, and
    exponents near +-308 and +-324, huge, or written with hundreds of leading zeros."""
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.one_of(
        st.sampled_from(EDGES),
        st.sampled_from(MANTISSAS),
        st.integers(1, 5000).map(lambda n: "9" * n),
        st.tuples(st.integers(1, 9), st.integers(0, 330), st.integers(0, 9)).map(
            lambda t: f"{t[0]}{str(t[2]) * t[1]}"),
        st.integers(0, 2**70).map(str),
        st.integers(0, 10**6).map(str),  # few digits: the server writes them back as they are
    ))
    fraction = draw(st.none() | st.integers(0, 999).map(str) | st.integers(1, 6000).flatmap(
        lambda n: st.sampled_from(["0", "1", "9"]).map(lambda d: d * n)))
    exponent = draw(st.none() | st.tuples(
        st.sampled_from(["e", "E"]), st.sampled_from(["", "+", "-"]),
        st.integers(0, 400).map(lambda n: "0" * n),
        st.sampled_from([0, 1, 7, 291, 292, 307, 308, 309, 323, 324, 325, 400, 10**20])
        | st.integers(0, 1000)).map(lambda t: f"{t[0]}{t[1]}{t[2]}{t[3]}"))
    return sign + whole + (f".{fraction}" if fraction else "") + (exponent or "")


PLACES = ['{"a": %s}', '{"a": [1, %s, "x"]}', '{"a": {"b": {"c": %s}}}', '{"n": %s, "m": 0}']


def render(server: LlamaServer, arguments: str) -> tuple[int, object]:
    """The status of the server rendering a session whose past call has these arguments, and
    the arguments as the prompt shows them (None when refused)."""
    call = {"id": "c1", "type": "function", "function": {"name": "fs_read",
                                                         "arguments": arguments}}
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "Not run"},
                {"role": "user", "content": "Say ok."}]
    response = server.post("/apply-template", {"model": MODEL, "messages": messages})
    assert response.status_code in (200, 500), (response.status_code, response.text[:300])
    if response.status_code == 500:
        assert "number" in response.text or "parse" in response.text, response.text[:300]
        return 500, None
    prompt = response.json()["prompt"]
    start = prompt.index('"arguments": ', prompt.index('"name": "fs_read"')) + len('"arguments": ')
    shown, _ = json.JSONDecoder().raw_decode(prompt, start)
    return 200, shown


def reads_back(server: LlamaServer, arguments: str) -> bool:
    """Rendered, every number the same value as sent (Python compares 2 and 2.0 as equal)."""
    status, shown = render(server, arguments)
    return status == 200 and shown == json.loads(arguments)


@pytest.fixture(scope="module")
def server(llama_router: LlamaServer) -> Iterator[LlamaServer]:
    assert reads_back(llama_router, '{"a": 1}'), llama_router.log()  # loads the model
    yield llama_router


short_profile = (lambda test: test) if LONG else settings(
    max_examples=EXAMPLES, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large])


@fuzz_at_most(LONG_EXAMPLES)
@hang_guard(EXAMPLES, 10)
@short_profile
@given(number=number_text(), place=st.sampled_from(PLACES))
def test_the_real_server_reads_a_number_exactly_when_loopd_says_it_can(server, number, place):
    arguments = place % number
    problem = arguments_problem(arguments)
    status, shown = render(server, arguments)
    same = status == 200 and shown == json.loads(arguments)
    assert same == (problem is None), (arguments[:120], len(arguments), status, problem)


@pytest.mark.parametrize("number", EDGES)
def test_the_edge_of_a_double_is_where_the_server_says(server, number):
    """The class's edge, each time: strtod's overflow point and the 64-bit integer limits."""
    arguments = PLACES[0] % number
    assert reads_back(server, arguments) == (arguments_problem(arguments) is None), arguments
