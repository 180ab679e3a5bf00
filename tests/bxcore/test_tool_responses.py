"""What a role answers a tool call with when it speaks for itself, and how a result is capped.

- ``plain_response(status, content)``: public, trusted, uncut; loopd, brokerd and memoryd all say
  their refusals and failures this way.
- ``cap_text(text, cap)``: a result whose UTF-8 passes ``cap`` bytes is cut at a character
  boundary and ends in TRUNCATED_MARK, the whole within ``cap``; loopd caps what the model reads,
  brokerd what a tool returns.
"""

from __future__ import annotations

import pytest
from bxcore.tools import TRUNCATED_MARK, DataClass, ToolResponse, cap_text, plain_response
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("status", ["ok", "denied", "failed"])
def test_a_plain_response_is_public_trusted_and_uncut(status):
    response = plain_response(status, "Denied: no grant")
    assert response == ToolResponse.model_validate({
        "status": status, "content": "Denied: no grant", "class": "public", "untrusted": False,
        "truncated": False,
    })
    assert response.data_class is DataClass.PUBLIC


def test_the_mark_is_a_line_of_its_own():
    assert TRUNCATED_MARK == "\n[truncated]"


def test_text_within_the_cap_is_kept_whole():
    assert cap_text("héllo", len("héllo".encode())) == ("héllo", False)


def test_a_cut_never_splits_a_character():
    text = "ab" + "é" * 20  # two bytes per é
    capped, cut = cap_text(text, len(TRUNCATED_MARK) + 5)
    assert (capped, cut) == ("abé" + TRUNCATED_MARK, True)


def test_a_cap_smaller_than_the_mark_gives_the_mark_alone():
    assert cap_text("x" * 100, 3) == (TRUNCATED_MARK, True)


@given(st.text(), st.integers(min_value=16, max_value=300))
def test_the_cap_cuts_at_a_character_boundary_and_stays_within_it(text, cap):
    capped, truncated = cap_text(text, cap)
    size = len(text.encode())
    assert truncated == (size > cap)
    if truncated:
        assert capped.endswith(TRUNCATED_MARK)
        assert len(capped.encode()) <= cap
        assert text.startswith(capped.removesuffix(TRUNCATED_MARK))
    else:
        assert capped == text
