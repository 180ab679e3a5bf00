"""The REST client against the fake: the six calls, 429 and 5xx retries, pending_post_id."""

from __future__ import annotations

import logging

import pytest
from bxcore.secrets import Secret
from gatewayd.errors import MattermostRefused, MattermostUnavailable
from gatewayd.rest import MattermostClient, retry_delay

from .harness import run
from .mmfake import serve


def client(url: str, token: str, **kwargs) -> MattermostClient:
    kwargs.setdefault("backoff", 0.01)
    return MattermostClient(url, Secret("mattermost_token", token), **kwargs)


def test_the_calls_gatewayd_makes(fake):
    bot, bot_token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")

    async def scenario():
        async with serve(fake) as url:
            mm = client(url, bot_token)
            me = await mm.me()
            assert (me.id, me.is_bot) == (bot, True)
            channel = await mm.direct_channel(bot, owner)
            assert channel.type == "D" and channel.name == "__".join(sorted((bot, owner)))
            assert (await mm.direct_channel(owner, bot)).id == channel.id  # get-or-create
            root = fake.user_posts(owner, channel.id, "hello")
            reply = await mm.create_post(channel.id, "…", root_id=root)
            assert reply.root_id == root and reply.user_id == bot
            edited = await mm.patch_post(reply.id, "the answer")
            assert edited.message == "the answer" and edited.edit_at > 0
            thread = await mm.thread(root)
            assert [p.id for p in thread.in_order()] == [root, reply.id]
            assert (await mm.get_post(root)).message == "hello"
            since = await mm.posts_since(channel.id, thread.posts[root].create_at - 1)
            assert {p.id for p in since.in_order()} == {root, reply.id}
            await mm.aclose()

    run(scenario())


def test_a_bad_token_is_refused_and_never_appears_in_logs_or_errors(fake, caplog):
    fake.add_user("boxmaker", bot=True)
    caplog.set_level(logging.DEBUG)

    async def scenario():
        async with serve(fake) as url:
            mm = client(url, "not-the-token-s3cr3t")
            with pytest.raises(MattermostRefused) as caught:
                await mm.me()
            await mm.aclose()
            return caught.value

    error = run(scenario())
    assert error.status == 401 and error.error_id == "api.context.session_expired.app_error"
    assert "s3cr3t" not in str(error) and "s3cr3t" not in caplog.text


def test_a_thread_reply_to_a_reply_is_refused_with_the_servers_error_id(fake):
    bot, token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")

    async def scenario():
        async with serve(fake) as url:
            mm = client(url, token)
            channel = await mm.direct_channel(bot, owner)
            root = fake.user_posts(owner, channel.id, "root")
            reply = await mm.create_post(channel.id, "reply", root_id=root)
            with pytest.raises(MattermostRefused) as caught:
                await mm.create_post(channel.id, "nested", root_id=reply.id)
            await mm.aclose()
            return caught.value

    assert run(scenario()).error_id == "api.post.create_post.root_id.app_error"


def test_429_waits_retry_after_and_5xx_is_retried(fake):
    bot, token = fake.add_user("boxmaker", bot=True)
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    async def scenario():
        async with serve(fake) as url:
            fake.fail("GET", "/users/", status=429)
            fake.fail("GET", "/users/", status=503, count=2)
            mm = client(url, token, sleep=fake_sleep)
            assert (await mm.me()).id == bot
            await mm.aclose()

    run(scenario())
    assert [s for m, p, s in fake.requests] == [429, 503, 503, 200]
    assert waits[0] == 1.0  # Retry-After from the text/plain 429 of http_429.txt
    assert len(waits) == 3


def test_retries_are_bounded(fake):
    _, token = fake.add_user("boxmaker", bot=True)

    async def scenario():
        async with serve(fake) as url:
            fake.fail("GET", "/users/", status=502, count=10)
            mm = client(url, token, retries=2)
            with pytest.raises(MattermostUnavailable, match="gave up after 3 attempts"):
                await mm.me()
            await mm.aclose()

    run(scenario())


def test_a_post_whose_reply_is_slow_is_retried_without_a_duplicate(fake):
    bot, token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")

    async def scenario():
        async with serve(fake) as url:
            mm = client(url, token, timeout=0.3)
            channel = await mm.direct_channel(bot, owner)
            fake.post_reply_delay = 1.0  # saved at once, but the answer comes too late
            post = await mm.create_post(channel.id, "once", pending_post_id="bx-test-1")
            fake.post_reply_delay = 0.0
            await mm.aclose()
            return post

    post = run(scenario())
    assert [p["id"] for p in fake.posts_by(bot)] == [post.id]


def test_a_retry_while_the_first_is_still_saving_gets_the_same_post(fake):
    bot, token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")

    async def scenario():
        async with serve(fake) as url:
            mm = client(url, token, timeout=0.2, backoff=0.2, retries=8)
            channel = await mm.direct_channel(bot, owner)
            fake.post_save_delay = 2.0  # the retry meets 500 ...deduplicate_create_post.pending
            post = await mm.create_post(channel.id, "once", pending_post_id="bx-test-2")
            await mm.aclose()
            return post

    post = run(scenario())
    assert [p["id"] for p in fake.posts_by(bot)] == [post.id]
    assert ("POST", "/api/v4/posts", 500) in fake.requests


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"retry-after": "7"}, 7.0),
        (429, {"x-ratelimit-reset": "3"}, 3.0),  # seconds until reset, not an epoch
    ],
)
def test_retry_delay_reads_the_rate_limit_headers(status, headers, expected):
    assert retry_delay(status, headers, 1, base=0.5) == expected


def test_retry_delay_backs_off_for_5xx_and_for_no_answer():
    assert 0.5 <= retry_delay(503, {}, 1, base=0.5) <= 0.75
    assert 2.0 <= retry_delay(None, {}, 3, base=0.5) <= 3.0
