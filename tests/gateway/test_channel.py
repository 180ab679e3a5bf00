"""End to end against a scripted loopd: a DM becomes a session, its thread continues it, and a
DM that arrives while loopd is busy or down waits in the queue and is answered once."""

from __future__ import annotations

import asyncio
import logging

from gatewayd import turns

from .harness import run, running, until


def answers(h, root):
    return [p["message"] for p in h.thread(root) if p["user_id"] == h.bot]


def test_a_dm_starts_a_session_and_its_answer_replaces_the_placeholder(fake):
    async def scenario():
        async with running(fake) as h:
            root = fake.user_posts(h.owner, h.dm, "what time is it?")
            await until(lambda: answers(h, root) == ["echo: what time is it?"])
            turn = h.loop.turns[0]
            assert (turn.session, turn.resume) == (f"mm-{root}", False)
            placeholder = h.thread(root)[1]
            assert placeholder["root_id"] == root  # the DM became the thread root
            assert placeholder["edit_at"] > 0  # the answer was edited into the placeholder

            reply = fake.user_posts(h.owner, h.dm, "and tomorrow?", root_id=root)
            await until(lambda: answers(h, root)[1:] == ["echo: and tomorrow?"])
            assert (h.loop.turns[1].session, h.loop.turns[1].resume) == (f"mm-{root}", True)
            assert reply in {p["id"] for p in h.thread(root)}

    run(scenario())


def test_progress_and_tool_calls_are_shown_while_the_turn_runs(fake):
    async def scenario():
        async with running(fake) as h:
            h.loop.steps = asyncio.Queue()
            root = fake.user_posts(h.owner, h.dm, "slow one")
            await until(lambda: len(h.loop.turns) == 1)
            shown = lambda: "\n".join(m for _, m in fake.edits)  # noqa: E731
            await asyncio.sleep(0.1)  # past the edit interval, so the next event is shown
            h.loop.steps.put_nowait(None)
            await until(lambda: "reading the conversation (100%)" in shown())
            await asyncio.sleep(0.1)
            h.loop.steps.put_nowait(None)
            await until(lambda: "running `clock`" in shown())
            await asyncio.sleep(0.1)
            h.loop.steps.put_nowait(None)
            await until(lambda: answers(h, root) == ["echo: slow one"])
            assert "echo:" in shown()

    run(scenario())


def test_a_dm_sent_while_loopd_is_down_is_answered_once_when_it_comes_back(fake):
    async def scenario():
        async with running(fake, loop_up=False) as h:
            root = fake.user_posts(h.owner, h.dm, "are you there?")
            await until(lambda: any("not running" in m for m in answers(h, root)))
            assert h.gateway.queue.pending_count() == 1
            await h.loop.start()
            await until(lambda: answers(h, root) == ["echo: are you there?"])
            await asyncio.sleep(0.5)  # further redelivery rounds must not send it again
            assert len(h.loop.turns) == 1
            assert h.gateway.queue.pending_count() == 0

    run(scenario())


def test_a_dm_for_a_busy_session_waits_and_is_delivered_once(fake):
    async def scenario():
        async with running(fake) as h:
            h.loop.busy_next = 2
            root = fake.user_posts(h.owner, h.dm, "hello")
            await until(lambda: answers(h, root) == ["echo: hello"])
            assert [t.content for t in h.loop.turns] == ["hello"]

    run(scenario())


def test_a_long_answer_is_split_into_several_replies(fake):
    long_answer = ("word " * 5000).strip()  # 24,999 runes: over the 16,383 limit

    async def scenario():
        async with running(fake) as h:
            h.loop.answer = lambda turn: long_answer
            root = fake.user_posts(h.owner, h.dm, "tell me everything")
            await until(lambda: len(answers(h, root)) == 2 and answers(h, root)[0] != "…")
            parts = answers(h, root)
            assert all(len(part) <= 16383 for part in parts)
            assert "".join(parts) == long_answer

    run(scenario())


def test_strangers_and_other_channels_get_nothing_and_the_refusal_is_logged_without_text(
    fake, caplog
):
    caplog.set_level(logging.INFO)

    async def scenario():
        async with running(fake) as h:
            stranger, _ = fake.add_user("stranger")
            stranger_dm = fake.data.direct(h.bot, stranger)["id"]
            fake.user_posts(stranger, stranger_dm, "secret plans of the stranger")
            team = fake.data.add_channel("O", "town-square", {h.bot, h.owner})
            fake.user_posts(h.owner, team["id"], "owner speaking in an open channel")
            root = fake.user_posts(h.owner, h.dm, "only this one")
            await until(lambda: answers(h, root) == ["echo: only this one"])
            assert [t.content for t in h.loop.turns] == ["only this one"]
            assert {p["channel_id"] for p in h.bot_posts()} == {h.dm}

    run(scenario())
    assert "user is not allowlisted" in caplog.text
    assert "channel is not allowlisted" in caplog.text
    assert "secret plans" not in caplog.text and "open channel" not in caplog.text


def test_an_allowlisted_channel_is_served(fake):
    async def scenario():
        bot_placeholder = fake.data.add_channel("O", "ops", set())  # members set below
        async with running(fake, channels=frozenset({bot_placeholder["id"]})) as h:
            fake.data.members[bot_placeholder["id"]] = {h.bot, h.owner}
            root = fake.user_posts(h.owner, bot_placeholder["id"], "status?")
            await until(lambda: answers(h, root) == ["echo: status?"])

    run(scenario())


def test_neither_the_token_nor_a_dms_text_is_logged_even_at_debug(fake, caplog):
    caplog.set_level(logging.DEBUG)
    tokens: list[str] = []

    async def scenario():
        async with running(fake) as h:
            tokens.extend(t for t, user in fake.data.tokens.items() if user == h.bot)
            root = fake.user_posts(h.owner, h.dm, "my very private words")
            await until(lambda: answers(h, root) == ["echo: my very private words"])

    run(scenario())
    assert tokens and tokens[0] not in caplog.text
    assert "my very private words" not in caplog.text


def test_a_turn_gatewayd_cannot_send_is_logged_as_its_bug_and_never_retried(
    fake, monkeypatch, caplog
):
    real = turns.Turn

    class UncheckedTurn:  # a bug injected: the turn is built without validation
        @staticmethod
        def model_validate(values):
            return real.model_construct(**{**values, "tool_choice": ["sometimes"]})

    monkeypatch.setattr(turns, "Turn", UncheckedTurn)
    caplog.set_level(logging.ERROR, logger="gatewayd")

    async def scenario():
        async with running(fake) as h:
            root = fake.user_posts(h.owner, h.dm, "hello")
            await until(lambda: any("a bug in gatewayd" in m for m in answers(h, root)))
            await asyncio.sleep(0.5)  # further redelivery rounds must not try it again
            assert h.loop.turns == []  # loopd was sent nothing, so it is blamed for nothing
            assert h.gateway.queue.pending_count() == 0

    run(scenario())
    bugs = [r for r in caplog.records if "our bug, not loopd's" in r.getMessage()]
    assert len(bugs) == 1 and "frame 'turn' we were sending: tool_choice" in bugs[0].getMessage()


def test_stopping_gatewayd_cancels_a_turn_being_delivered(fake):
    """Each delivery runs in the gateway's one task group: cancelling gatewayd's run (as
    SIGTERM does) cancels it with the WebSocket and the dispatcher, and no answer is posted
    (the queue still holds the post: tests/faults/test_gateway_crash.py restarts gatewayd)."""

    async def scenario():
        async with running(fake) as h:
            h.loop.steps = asyncio.Queue()  # the turn never goes on
            root = fake.user_posts(h.owner, h.dm, "slow one")
            await until(lambda: len(h.loop.turns) == 1)
            (delivery,) = h.gateway._running.values()
        assert delivery.cancelled()
        assert answers(h, root) == [turns.PLACEHOLDER]  # never edited into an answer

    run(scenario())
