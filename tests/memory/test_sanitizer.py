"""The sanitizer: every memory write, and every baseline build, passes bxcore.sanitizer.check."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from bxcore.sanitizer import Accepted, Refused, check
from hypothesis import given
from hypothesis import strategies as st

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sanitizer"


def _load(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


INJECTIONS = _load("injections.jsonl")
BENIGN = _load("benign.jsonl")


@pytest.mark.parametrize("case", INJECTIONS, ids=[c["text"][:40] for c in INJECTIONS])
def test_every_injection_attempt_in_the_corpus_is_refused_by_its_rule(case):
    verdict = check(case["text"])
    assert isinstance(verdict, Refused)
    assert verdict.rule == case["rule"]
    assert 0 <= verdict.position < len(case["text"])


@pytest.mark.parametrize("case", BENIGN, ids=[c["text"][:40] for c in BENIGN])
def test_ordinary_notes_pass(case):
    assert check(case["text"]) == Accepted()


def test_the_corpus_covers_every_rule_and_the_templates_named_in_the_brief():
    rules = {case["rule"] for case in INJECTIONS}
    assert rules == {"control", "invisible", "markup", "instruction"}
    joined = "\n".join(case["text"] for case in INJECTIONS)
    for marker in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                   "<|start_header_id|>", "<start_of_turn>", "[INST]", "<|channel|>"):
        assert marker in joined


def test_the_position_points_at_the_offending_text_in_the_original():
    text = "fine text, then \uff1c\uff5cim_start\uff5c\uff1e"
    verdict = check(text)
    assert isinstance(verdict, Refused)
    assert verdict.position == text.index("\uff1c")
    verdict = check("ok\u200bthen")
    assert isinstance(verdict, Refused) and verdict.position == 2
    assert "U+200B" in verdict.describe()


def test_newline_and_tab_are_the_only_controls_allowed():
    assert check("a\nb\tc") == Accepted()
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]:
        if chr(code) in "\n\t":
            continue
        verdict = check(f"x{chr(code)}")
        assert isinstance(verdict, Refused) and verdict.rule == "control", hex(code)


def test_every_unicode_tag_character_is_refused():
    for code in range(0xE0000, 0xE0080):
        verdict = check(f"a{chr(code)}")
        assert not verdict.ok


MARKERS = ["<|im_start|>", "</think>", "<tool_call>", "<|start_header_id|>", "<start_of_turn>",
           "[INST]", "<|channel|>", "<|message|>"]


@given(st.text(), st.sampled_from(MARKERS), st.text())
def test_markup_is_refused_wherever_it_is_inserted(before, marker, after):
    verdict = check(before + marker + after)
    assert not verdict.ok


@given(st.text())
def test_check_never_raises_and_an_accepted_text_has_no_forbidden_character(text):
    verdict = check(text)
    assert isinstance(verdict, Accepted | Refused)
    if verdict.ok:
        for char in text:
            assert char in "\n\t" or unicodedata.category(char) not in {
                "Cc", "Cf", "Co", "Cn", "Zl", "Zp", "Cs"
            }
    else:
        assert isinstance(verdict, Refused)
        assert 0 <= verdict.position <= len(text)

