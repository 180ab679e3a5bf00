"""gatewayd as a crash victim: SIGKILL it at a random point while it carries an owner's DM (from
the fake Mattermost) to the real loopd, send a second DM while it is down, start it again.

After each kill: every DM reaches loopd as exactly one turn (none lost: the one in flight is in
the durable queue or already delivered; the one sent while down comes by the REST catch-up;
none doubled: a delivered post is never offered again); the state on disk is consistent (the
fault suite's invariants); and a new DM after the restart is answered in Mattermost with the
answer in loopd's log. A DM whose turn was delivered before the kill may keep its placeholder
unanswered: the count is printed (gatewayd does not resume an answer it was streaming).
"""

from __future__ import annotations

import random
import time

import pytest
from loopd.store import SessionStore

from .invariants import assert_consistent
from .mattermost import MattermostThread
from .profile import by_profile, hang_guard
from .rig import scripted_rig
from .stack import ROLES

TRIALS = by_profile(3, 40)
TRIAL_LIMIT = 300  # seconds: a kill, a restart and three DMs, each bounded by its own wait
pytestmark = [pytest.mark.sandbox, hang_guard(TRIALS + 1, TRIAL_LIMIT)]
SEED = 2211
WAIT = 120.0  # a hang guard on delivery, not a speed check


def user_turns(home, root: str) -> list[str]:
    session = f"mm-{root}"
    if not (home / "sessions" / session).is_dir():
        return []
    records = SessionStore(home).open(session).records
    return [r.content for r in records if getattr(r, "type", "") == "user"]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_gatewayd_killed_anywhere_loses_and_doubles_no_dm(short_dir):
    rng = random.Random(SEED)
    unanswered = 0
    with MattermostThread() as chat:
        section, env = chat.config(short_dir)
        with scripted_rig(short_dir, roles=(*ROLES, "gatewayd"), extra_config=section,
                          env=env) as rig:
            stack, home = rig.stack, rig.stack.home
            root = chat.owner_says("warm up")
            wait_until(lambda: any(p["message"].startswith("ok:") for p in chat.bot_posts_in(root)),
                       "the first DM was never answered")
            for trial in range(TRIALS):
                in_flight = chat.owner_says(f"trial {trial} before the kill")
                time.sleep(rng.uniform(0, 1.0))
                stack.kill("gatewayd")
                while_down = chat.owner_says(f"trial {trial} while gatewayd is down")
                stack.start("gatewayd")
                for post in (in_flight, while_down):
                    wait_until(lambda post=post: user_turns(home, post),
                               f"trial {trial}: DM {post} never reached loopd")
                said = f"trial {trial} after the restart"
                after = chat.owner_says(said)
                wait_until(lambda after=after, said=said: any(
                    p["message"] == f"ok: {said}" for p in chat.bot_posts_in(after)),
                    f"trial {trial}: no answer after the restart")
                for post in (in_flight, while_down, after):
                    assert len(user_turns(home, post)) == 1, (trial, post, user_turns(home, post))
                if not any(p["message"].startswith("ok:") for p in chat.bot_posts_in(in_flight)):
                    unanswered += 1
                assert_consistent(stack.config, home)
    print(f"gatewayd crash trials: {TRIALS}; DMs delivered exactly once: {TRIALS * 3}; "
          f"in-flight DMs left with an unanswered placeholder: {unanswered}")
