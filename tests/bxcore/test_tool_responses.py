"""What a role answers a tool call with when it speaks for itself, and how a result is capped.

- ``plain_response(status, content)``: public, trusted, uncut; loopd, brokerd and memoryd all say
  their refusals and failures this way.
- ``cap_text(text, cap)``: a result whose UTF-8 passes ``cap`` bytes is cut at a character
  boundary and ends in TRUNCATED_MARK, the whole within ``cap``; loopd caps what the model reads,
  brokerd what a tool returns.
- ``valid_unicode(text)``: what a tool returned that is not Unicode (a file name that is not
  UTF-8, read with surrogateescape) is shown escaped, so it can be capped, audited and sent.
"""

from __future__ import annotations

import pytest
from bxcore.tools import (
    TRUNCATED_MARK,
    DataClass,
    ToolResponse,
    cap_text,
    plain_response,
    valid_unicode,
)
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


@given(st.text(st.characters() | st.integers(0xD800, 0xDFFF).map(chr)))  # lone surrogates too
def test_text_that_is_not_unicode_is_shown_escaped_and_unicode_is_kept(text):
    shown = valid_unicode(text)
    shown.encode("utf-8")  # never raises
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert shown != text
    else:
        assert shown is text


@given(st.binary(max_size=40))
def test_a_name_that_is_not_utf8_shows_its_bytes_as_python_escapes_them(name):
    assert valid_unicode(name.decode("utf-8", "surrogateescape")) == name.decode(
        "utf-8", "backslashreplace")
