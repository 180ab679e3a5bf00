"""The WebSocket under faults: drops, server restarts, seq gaps, duplicated, reordered and
malformed events, unanswered pings. No DM is lost and none is delivered twice."""

from __future__ import annotations

import asyncio
import json

from .harness import run, running, until


def answered(h) -> list[str]:
    return sorted(t.content for t in h.loop.turns)


def test_a_dropped_socket_resumes_and_the_missed_event_is_replayed(fake):
    async def scenario():
        async with running(fake) as h:
            fake.user_posts(h.owner, h.dm, "one")
            await until(lambda: answered(h) == ["one"])
            connection_id = h.gateway.socket.tracker.connection_id
            fake.hub.drop()
            fake.user_posts(h.owner, h.dm, "two")  # sent while disconnected: dead queue
            await until(lambda: answered(h) == ["one", "two"])
            assert h.gateway.socket.connections == 2
            assert h.gateway.socket.tracker.connection_id == connection_id  # resumed, no hello

    run(scenario())


def test_after_a_server_restart_the_lost_dm_is_caught_up_over_rest(fake):
    async def scenario():
        async with running(fake) as h:
            fake.user_posts(h.owner, h.dm, "before")
            await until(lambda: answered(h) == ["before"])
            old = h.gateway.socket.tracker.connection_id
            fake.hub.forget()  # the server lost every connection and its dead queue
            fake.user_posts(h.owner, h.dm, "while restarting")
            await until(lambda: answered(h) == ["before", "while restarting"])
            assert h.gateway.socket.tracker.connection_id != old
            assert any(path.endswith("/posts") and method == "GET"
                       for method, path, _ in fake.requests)

    run(scenario())


def test_a_seq_gap_makes_it_reconnect_and_resume(fake):
    async def scenario():
        async with running(fake) as h:
            fake.hub.knobs.gap_next = 2
            fake.user_posts(h.owner, h.dm, "after a gap")
            await until(lambda: answered(h) == ["after a gap"])
            await until(lambda: h.gateway.socket.connections >= 2)

    run(scenario())


def test_duplicated_and_reordered_events_deliver_each_dm_once(fake):
    async def scenario():
        async with running(fake) as h:
            fake.hub.knobs.duplicate_next = 1
            fake.user_posts(h.owner, h.dm, "dup")
            fake.hub.knobs.hold_next = 1
            fake.user_posts(h.owner, h.dm, "first")  # held back, sent after "second"
            fake.user_posts(h.owner, h.dm, "second")
            await until(lambda: len(answered(h)) == 3)
            await asyncio.sleep(0.3)
            assert answered(h) == ["dup", "first", "second"]

    run(scenario())


def test_malformed_events_are_skipped_and_the_daemon_carries_on(fake, caplog):
    async def scenario():
        async with running(fake) as h:
            good = fake.data.posted_data(fake.data.posts[fake.user_posts(h.owner, h.dm, "ok")])
            await until(lambda: answered(h) == ["ok"])
            bad_json = dict(good, post="{not json")
            missing = dict(good, post=json.dumps({"message": "no id, no user"}))
            for data in (bad_json, missing):
                fake.hub.emit("posted", data, h.dm, {h.bot})
            fake.user_posts(h.owner, h.dm, "still here")
            await until(lambda: answered(h) == ["ok", "still here"])

    run(scenario())
    assert "data.post is not JSON" in caplog.text
    assert "no id, no user" not in caplog.text


def test_an_unanswered_ping_closes_the_socket_and_it_reconnects(fake):
    async def scenario():
        async with running(fake, ping_interval=0.2) as h:
            fake.hub.knobs.answer_pings = False
            await until(lambda: h.gateway.socket.connections >= 2)
            fake.hub.knobs.answer_pings = True
            fake.user_posts(h.owner, h.dm, "after the ping timeout")
            await until(lambda: answered(h) == ["after the ping timeout"])

    run(scenario())


def test_the_bots_own_posts_and_edits_are_ignored(fake):
    async def scenario():
        async with running(fake) as h:
            fake.user_posts(h.owner, h.dm, "hi")
            await until(lambda: answered(h) == ["hi"])
            await asyncio.sleep(0.3)
            # the placeholder's posted event and its edits all came back over the socket
            assert any(json.loads(t)["event"] == "post_edited"
                       for c in fake.hub.connections.values() for _, t in c.dead)
            assert answered(h) == ["hi"]

    run(scenario())
