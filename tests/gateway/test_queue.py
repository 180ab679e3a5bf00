"""The durable queue: one offer per post, in order per session, survives a restart."""

from __future__ import annotations

import sqlite3

import pytest
from bxcore.config import parse_config
from bxcore.errors import ConfigError
from gatewayd.errors import QueueError
from gatewayd.queue import Item, Queue


def item(post_id: str, session: str = "mm-a", create_at: int = 1) -> Item:
    return Item(post_id=post_id, session=session, resume=False, channel_id="c", root_id="r",
                user_id="u", content=f"text of {post_id}", create_at=create_at)


def test_a_post_is_offered_once_and_survives_a_restart(tmp_path):
    queue = Queue(tmp_path / "q.sqlite3")
    assert queue.offer(item("p1")) is True
    assert queue.offer(item("p1")) is False  # the replay, the catch-up, a duplicate event
    queue.close()
    again = Queue(tmp_path / "q.sqlite3")
    assert [i.post_id for i in again.heads(now=0, busy=set())] == ["p1"]
    assert again.watermark() == 1


def test_each_session_delivers_its_oldest_first_and_one_at_a_time(tmp_path):
    queue = Queue(tmp_path / "q.sqlite3")
    queue.offer(item("late", create_at=5))
    queue.offer(item("early", create_at=2))
    queue.offer(item("other", session="mm-b", create_at=3))
    assert {i.post_id for i in queue.heads(now=0, busy=set())} == {"early", "other"}
    assert [i.post_id for i in queue.heads(now=0, busy={"mm-b"})] == ["early"]
    queue.delivered("early")
    assert {i.post_id for i in queue.heads(now=0, busy=set())} == {"late", "other"}


def test_a_deferred_post_waits_and_a_delivered_one_loses_its_text(tmp_path):
    path = tmp_path / "q.sqlite3"
    queue = Queue(path)
    queue.offer(item("p1"))
    queue.defer("p1", not_before=100.0)
    assert queue.heads(now=99.0, busy=set()) == []
    (head,) = queue.heads(now=100.0, busy=set())
    assert head.attempts == 1
    queue.delivered("p1")
    assert queue.pending_count() == 0
    row = sqlite3.connect(path).execute("SELECT content FROM inbox").fetchone()
    assert row == ("",)


def test_a_handled_command_is_remembered_but_never_delivered(tmp_path):
    queue = Queue(tmp_path / "q.sqlite3")
    assert queue.offer(item("cmd"), handled=True) is True
    assert queue.offer(item("cmd"), handled=True) is False
    assert queue.heads(now=0, busy=set()) == []


def test_the_schema_is_migrated_exactly_once(tmp_path):
    Queue(tmp_path / "q.sqlite3").close()
    Queue(tmp_path / "q.sqlite3").close()
    db = sqlite3.connect(tmp_path / "q.sqlite3")
    assert db.execute("SELECT name FROM migrations").fetchall() == [("m001_inbox",)]


def test_an_unusable_queue_path_is_a_queue_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(QueueError, match="cannot open the queue"):
        Queue(tmp_path / "file" / "q.sqlite3")


def test_the_gateway_config_section(tmp_path):
    config = parse_config(
        '[gateway]\nserver = "https://chat.example.org/"\nallowlist = "allow.txt"\n'
        f'channels = ["{"c" * 26}"]\n', "config.toml", tmp_path,
    )
    assert config.gateway.server == "https://chat.example.org"
    assert config.gateway.allowlist == tmp_path / "allow.txt"
    with pytest.raises(ConfigError, match=r"config.toml: gateway.channels: .*not a Mattermost id"):
        parse_config('[gateway]\nchannels = ["town-square"]\n', "config.toml")
    with pytest.raises(ConfigError, match=r"gateway.server: .*expected http"):
        parse_config('[gateway]\nserver = "chat.example.org"\n', "config.toml")
