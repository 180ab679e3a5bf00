"""The model cannot approve its own call: whatever it writes reaches the thread as the bot's post,
and only the owner's `!approve` settles an ask call (brief, authority contract).

The whole path is real: an owner's DM through the fake Mattermost and gatewayd, the obedient
model (it does what the DM says) asking for an `ask` write through loopd and brokerd, gatewayd
posting the approval request in the thread. The bot's own account then answers `!approve <id>`
with the real id, as a model's reply would; the call must still expire. The same write approved
by the owner in a second thread lands, so the first refusal is gatewayd's doing, not a broken rig.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from brokerd.audit import entries
from support.sandbox_uid import writable_by_sandbox

from .mattermost import MattermostThread
from .rig import directive, scripted_rig, tool_results, via_call_tool
from .stack import ROLES
from .test_hostile_model import write_grant

pytestmark = pytest.mark.sandbox

APPROVAL_TIMEOUT = 10.0  # the bot's answer is seen (and ignored) within milliseconds of its post
WAIT = 120.0  # a hang guard, not a speed check
APPROVE_HINT = re.compile(r"!approve (\S+?)`")


def wait_for(probe, what: str):
    deadline = time.monotonic() + WAIT
    while (found := probe()) is None:
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return found


def approval_id(chat: MattermostThread, root: str) -> str:
    def probe() -> str | None:
        for post in chat.bot_posts_in(root):
            if match := APPROVE_HINT.search(post["message"]):
                return match.group(1)
        return None

    return wait_for(probe, "gatewayd never posted the approval request in the thread")


def settled(home: Path, root: str) -> dict | None:
    log = home / "sessions" / f"mm-{root}" / "0.jsonl"
    results = tool_results(home, f"mm-{root}") if log.exists() else []
    return results[0] if results else None


def decisions_on(home: Path, approval: str) -> list:
    return [e for e in entries(home / "audit") if e.kind == "decision" and e.approval == approval]


def test_the_bots_own_approve_in_the_thread_settles_nothing(short_dir):
    inbox = writable_by_sandbox(short_dir / "inbox")
    target = inbox / "w.txt"
    write = directive(via_call_tool("fs.write", {"path": str(target), "content": "pwned"}))
    with MattermostThread() as chat:
        section, env = chat.config(short_dir)
        with scripted_rig(short_dir, roles=(*ROLES, "gatewayd"), extra_config=section, env=env,
                          grants={"inbox.toml": write_grant(inbox)}, approvers=(chat.owner,),
                          approval_timeout=APPROVAL_TIMEOUT) as rig:
            home = rig.stack.home

            hostile = chat.owner_says(write)
            first = approval_id(chat, hostile)
            chat.bot_says(f"!approve {first}", hostile)
            result = wait_for(lambda: settled(home, hostile), "the ask call never settled")
            assert "expired" in result["content"], result
            assert not target.exists()
            answers = [e.by for e in decisions_on(home, first) if e.by is not None]
            assert answers == [], answers  # nobody answered it: the bot's post was no answer

            approved = chat.owner_says(write)
            second = approval_id(chat, approved)
            chat.owner_says(f"!approve {second}", approved)
            result = wait_for(lambda: settled(home, approved), "the approved call never ran")
            assert target.read_text() == "pwned", result
            (answer,) = [e.by for e in decisions_on(home, second) if e.by is not None]
            assert chat.owner in answer, answer
