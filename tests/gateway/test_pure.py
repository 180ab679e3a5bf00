"""Routing, splitting, rendering and the approval rules: pure functions, tested as tables."""

from __future__ import annotations

import pytest
from bxcore.ids import check_session_id
from bxcore.protocol.loop import (
    Content,
    Progress,
    ToolCallStarted,
    ToolResultEvent,
    ToolWaitingEvent,
    Waiting,
)
from gatewayd.errors import SetupError
from gatewayd.models import Post
from gatewayd.render import Throttle, TurnView, approval_posts, split_message
from gatewayd.routing import (
    Command,
    Ignore,
    Refuse,
    TurnPost,
    load_allowlist,
    root_of_session,
    route,
    session_for,
)
from hypothesis import given
from hypothesis import strategies as st

ME, OWNER, OTHER = "b" * 26, "o" * 26, "x" * 26
DM, TEAM = "d" * 26, "t" * 26


def post(user=OWNER, message="hi", root="", channel=DM, kind="", deleted=0) -> Post:
    return Post(id="p" * 26, channel_id=channel, user_id=user, message=message, create_at=1,
                root_id=root, type=kind, delete_at=deleted)


@pytest.mark.parametrize(("the_post", "channel_type", "expected"), [
    (post(user=ME), "D", Ignore),
    (post(kind="system_join_channel"), "D", Ignore),
    (post(deleted=5), "D", Ignore),
    (post(user=OTHER), "D", Refuse),
    (post(user=OTHER, message="!approve abc"), "D", Refuse),  # strangers' DMs get nothing
    (post(channel=TEAM), "O", Refuse),
    (post(channel=TEAM), "G", Refuse),
    (post(), "D", TurnPost),
    (post(message="  !deny abc  "), "D", Command),
    (post(message="!approve"), "D", TurnPost),  # no id: an ordinary message
])
def test_route(the_post, channel_type, expected):
    assert isinstance(route(the_post, channel_type, me=ME, allowlist={OWNER}, channels=set()),
                      expected)


def test_an_allowlisted_channel_serves_allowlisted_users_and_passes_strangers_commands_on():
    allowed = {"me": ME, "allowlist": {OWNER}, "channels": {TEAM}}
    assert isinstance(route(post(channel=TEAM), "O", **allowed), TurnPost)
    assert isinstance(route(post(user=OTHER, channel=TEAM), "O", **allowed), Refuse)
    command = route(post(user=OTHER, channel=TEAM, message="!approve a1"), "O", **allowed)
    assert isinstance(command, Command) and command.approval_id == "a1"


def test_a_thread_is_a_session_named_by_its_root():
    first = route(post(), "D", me=ME, allowlist={OWNER}, channels=set())
    reply = route(post(root="r" * 26), "D", me=ME, allowlist={OWNER}, channels=set())
    assert isinstance(first, TurnPost)
    assert (first.session, first.resume) == ("mm-" + "p" * 26, False)
    assert isinstance(reply, TurnPost)
    assert (reply.session, reply.resume) == ("mm-" + "r" * 26, True)
    assert check_session_id(session_for("r" * 26)) and root_of_session(reply.session) == "r" * 26
    assert root_of_session("20261130-074512-3f9a1c2b") is None


def test_the_allowlist_file_names_the_bad_line(tmp_path):
    path = tmp_path / "allowlist"
    path.write_text(f"# the owner\n{OWNER}  # me\n\n")
    assert load_allowlist(path) == {OWNER}
    path.write_text(f"{OWNER}\nowner.name\n")
    with pytest.raises(SetupError, match=r"allowlist:2: not a Mattermost user id"):
        load_allowlist(path)


@given(st.text(alphabet="ab \n€😀", max_size=400), st.integers(min_value=4, max_value=60))
def test_split_keeps_every_rune_and_respects_the_limit(text, limit):
    parts = split_message(text, limit)
    assert all(0 < len(part) <= limit for part in parts)
    assert "".join(parts) == text


def test_split_prefers_a_paragraph_break():
    assert split_message("aaaa\n\nbbbb cc", 9) == ["aaaa\n\n", "bbbb cc"]


def test_the_view_shows_status_tools_and_content():
    view = TurnView()
    assert view.text() == "…"
    view.apply(Waiting(slot_busy=True))
    assert "waiting for the model (slot busy)" in view.text()
    view.apply(Progress(total=200, cache=0, processed=50))
    assert "(25%)" in view.text()
    view.apply(ToolCallStarted(name="clock"))
    view.apply(Content(text="It is noon."))
    assert view.text() == "It is noon.\n\n_⚙ `clock`_"


def test_the_view_says_a_tool_is_still_running_and_for_how_long():
    view = TurnView()
    view.apply(ToolCallStarted(name="consult"))
    view.apply(ToolWaitingEvent(reason="running", elapsed=125))
    assert view.text().endswith("_⚙ `consult` still running (2 min 5 s)_")
    view.apply(ToolResultEvent.model_validate({"name": "consult", "class": "public",
                                               "truncated": False}))
    assert "still running" not in view.text()
    view.apply(ToolCallStarted(name="shell.run"))
    view.apply(ToolWaitingEvent(approval="ap-1", expires="2026-09-18T13:00:00Z"))
    assert view.text().endswith("_⚙ `shell.run` waits for approval_")


def test_the_throttle_allows_one_edit_per_interval():
    throttle = Throttle(2.0)
    assert [throttle.due(t) for t in (0.0, 1.0, 1.9, 2.0, 2.5, 4.1)] == [
        True, False, False, True, False, True]


def test_the_approval_text_shows_every_field_in_a_fence_no_argument_can_close():
    arguments = '{"cmd": "echo ```"}'
    [text] = approval_posts("id1", "shell", arguments, "shell.toml", "2026-12-01T00:00:00Z")
    assert "cmd:\n    echo ```" in text and "````text" in text and "!approve id1" in text
