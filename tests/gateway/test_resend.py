"""A post gatewayd delivered but did not mark delivered (SIGKILL between writing the ``turn``
frame and the queue's commit) is delivered again on restart, with the same origin; loopd (the
real loop.sock handler, its inference scripted) runs it once and answers the resend with the first
answer, which gatewayd posts. Exactly once end to end, not at-least-once."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from bxcore.config.inference import SlotSection
from bxcore.records import User
from bxcore.secrets import Secret
from gatewayd.queue import Item, Queue
from gatewayd.rest import MattermostClient
from gatewayd.turns import TurnOutcome, TurnRunner
from loop.support import ScriptedInference, fixed_baselines, make_loop, say
from loopd.sessions import Sessions
from loopd.sockets import handler
from loopd.store import SessionStore

from .harness import run
from .mmfake import serve


class Killed(BaseException):
    """gatewayd's SIGKILL: nothing after this point runs, nothing is committed."""


class KilledBeforeDelivered(Queue):
    def delivered(self, post_id: str) -> None:
        raise Killed()


def test_a_post_delivered_twice_is_one_turn_in_loopd_and_its_answer_is_posted(fake):
    bot, token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")
    dm = fake.data.direct(bot, owner)["id"]
    post = fake.user_posts(owner, dm, "what time is it?")
    directory = Path(tempfile.mkdtemp(prefix="gwresend", dir="/tmp"))
    inference = ScriptedInference([say("It is noon.")])  # a second turn would find no reply
    sessions = Sessions(store=SessionStore(directory / "home"), loop=make_loop(inference),
                        new_baseline=fixed_baselines, slots=SlotSection(main=0, background=1))
    item = Item(post_id=post, session=f"mm-{post}", resume=False, channel_id=dm, root_id=post,
                user_id=owner, content="what time is it?", create_at=1)

    async def deliver(queue: Queue, url: str) -> TurnOutcome:
        rest = MattermostClient(url, Secret("mattermost_token", token), backoff=0.01)
        try:
            runner = TurnRunner(rest, queue, directory / "loop.sock", edit_interval=0.05)
            pending = queue.heads(now=float("inf"), busy=set())
            assert [p.post_id for p in pending] == [post]
            return await runner.deliver(pending[0])
        finally:
            await rest.aclose()

    async def scenario() -> None:
        listener = await asyncio.start_unix_server(handler(sessions),
                                                   path=str(directory / "loop.sock"))
        try:
            async with serve(fake) as url:
                first = KilledBeforeDelivered(directory / "queue.sqlite3")
                first.offer(item)
                try:
                    await deliver(first, url)
                    raise AssertionError("the first delivery was not killed")
                except Killed:
                    first.close()
                restarted = Queue(directory / "queue.sqlite3")
                while (outcome := await deliver(restarted, url)) is TurnOutcome.BUSY:
                    await asyncio.sleep(0.05)  # the first turn still runs: gatewayd waits
                assert outcome is TurnOutcome.DELIVERED
                assert restarted.pending_count() == 0
                restarted.close()
        finally:
            listener.close()
            await listener.wait_closed()

    try:
        run(scenario())
        records = SessionStore(directory / "home").open(f"mm-{post}").records
        users = [r for r in records if isinstance(r, User)]
        assert [(u.content, u.origin) for u in users] == [
            ("what time is it?", f"mattermost:{post}")]
        assert len(inference.requests) == 1
        answers = [p["message"] for p in fake.posts_by(bot) if p["root_id"] == post]
        assert answers == ["It is noon."]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
