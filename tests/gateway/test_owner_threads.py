"""A session that did not start in Mattermost (a scheduled job's run, a subagent) still reaches
the owner: its first approval or notice opens a thread of its own in the owner's DM with the bot,
the owner answers ``!approve`` there, and the job's answer (``owner_notice``) follows in the same
thread. Against the fake Mattermost, which is validated against the v4 spec."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from bxcore.display import describe_call
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import approval
from bxcore.protocol.approval import (
    APPROVAL_ANSWER,
    ERROR,
    NOTICE_POSTED,
    ApprovalAnswer,
    NoticePosted,
    OwnerNotice,
)
from gatewayd.owner_threads import opening_text, owner_of

from .harness import run, running, until
from .scripted import ask_approval
from .test_approvals import request_for

JOB = "job-morning-notes-20261201-073000-3f9a1c2b"


async def notify_owner(socket, session: str, text: str) -> Frame:
    """A job's side: one connection per notice; returns the final frame."""
    stream = await FrameStream.connect(socket, kinds=approval.FROM_GATEWAYD)
    try:
        await stream.write(Frame.of(approval.OWNER_NOTICE, OwnerNotice(session=session, text=text),
                                    final=True))
        return await stream.read(timeout=30)
    finally:
        await stream.close()


def roots_in(h, channel: str) -> list[dict]:
    return [p for p in h.fake.data.posts.values()
            if p["channel_id"] == channel and not p["root_id"]]


def test_a_jobs_approval_opens_a_dm_thread_the_owner_answers_in_and_its_answer_follows(fake):
    async def scenario():
        async with running(fake) as h:
            request = request_for(JOB)
            asked = asyncio.create_task(ask_approval(h.gateway.settings.gateway_socket, request))
            await until(lambda: any("Approval needed" in p["message"]
                                    for p in h.fake.data.posts.values()))
            (root,) = roots_in(h, h.dm)  # a new thread in the owner's DM, opened by the bot
            assert root["user_id"] == h.bot and JOB in root["message"]
            assert "Scheduled job run" in root["message"]
            shown = [p["message"] for p in h.thread(root["id"]) if "Approval needed" in
                     p["message"]]
            assert shown and describe_call(request.tool, request.arguments) in shown[0]

            fake.user_posts(h.owner, h.dm, f"!approve {request.id}", root_id=root["id"])
            frame = await asyncio.wait_for(asked, 15)
            assert frame.kind == APPROVAL_ANSWER
            answer = frame.parse(ApprovalAnswer)
            assert (answer.verdict, answer.by) == ("approve", h.owner)

            done = await notify_owner(h.gateway.settings.gateway_socket, JOB,
                                      "**Job morning-notes** answered:\n\nThree notes changed.")
            assert done.kind == NOTICE_POSTED and done.final
            assert done.parse(NoticePosted).root_id == root["id"]  # the same thread
            await until(lambda: any("Three notes changed." in p["message"]
                                    for p in h.thread(root["id"])))
            assert len(roots_in(h, h.dm)) == 1
            assert h.loop.turns == []  # nothing of this was a turn

    run(scenario())


def test_each_session_gets_its_own_thread_and_a_notice_alone_opens_one(fake):
    async def scenario():
        async with running(fake) as h:
            sock = h.gateway.settings.gateway_socket
            first = (await notify_owner(sock, JOB, "first run done")).parse(NoticePosted)
            other = (await notify_owner(sock, "sub-20261201-073000-3f9a1c2b", "child done")
                     ).parse(NoticePosted)
            again = (await notify_owner(sock, JOB, "and once more")).parse(NoticePosted)
            assert first.root_id == again.root_id != other.root_id
            assert {r["id"] for r in roots_in(h, h.dm)} == {first.root_id, other.root_id}

    run(scenario())


def test_without_an_owner_the_approval_is_refused_naming_the_key(fake):
    async def scenario():
        friend, _ = fake.add_user("friend")
        async with running(fake, extra_allowed=frozenset({friend})) as h:  # two users
            frame = await ask_approval(h.gateway.settings.gateway_socket, request_for(JOB))
            assert frame.kind == ERROR and frame.body["code"] == "bad_request"
            assert "[gateway] owner" in frame.body["message"]
            assert roots_in(h, h.dm) == []

    run(scenario())


@pytest.mark.parametrize(("configured", "allowlist", "owner"), [
    (None, {"a" * 26}, "a" * 26),
    (None, {"a" * 26, "b" * 26}, None),
    ("b" * 26, {"a" * 26, "b" * 26}, "b" * 26),
    (None, set(), None),
])
def test_the_owner_is_configured_or_the_allowlists_only_user(configured, allowlist, owner):
    assert owner_of(configured, frozenset(allowlist)) == owner


def test_the_opening_post_says_what_the_session_is():
    assert opening_text(JOB).startswith("**Scheduled job run** `job-")
    assert opening_text("sub-1").startswith("**Subagent** `sub-1`")
    assert opening_text("chat-1").startswith("**Session** `chat-1`")


async def job_run(h, tmp_path, name: str, ask: str) -> tuple[int, str, str]:
    """``bxctl job run NAME`` as the timer runs it, against this gatewayd and loop.sock."""
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    (jobs / f"{name}.toml").write_text(f'ask = "{ask}"\nschedule = "*-*-* 07:30:00"\n')
    settings = h.gateway.settings
    config = tmp_path / "config.toml"
    config.write_text(
        f'[paths]\nhome = "{tmp_path}/home"\nrun = "{tmp_path}/run"\n'
        f'[channel]\nsocket = "{settings.loop_socket}"\n'
        f'[gateway]\nsocket = "{settings.gateway_socket}"\n[broker]\njobs = "{jobs}"\n')
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bxctl"), "job", "run", name, "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    return process.returncode, out.decode(), err.decode()


def test_bxctl_job_run_sends_its_answer_to_the_owner_in_a_thread_of_its_own(fake, tmp_path):
    async def scenario():
        async with running(fake) as h:
            h.loop.answer = lambda turn: "Three notes changed since yesterday."
            status, out, err = await job_run(h, tmp_path, "morning-notes", "What changed?")
            assert (status, out) == (0, "Three notes changed since yesterday.\n"), err
            (turn,) = h.loop.turns
            assert turn.session.startswith("job-morning-notes-")
            assert (turn.session_kind, turn.resume, turn.content) == \
                ("background", False, "What changed?")
            (root,) = roots_in(h, h.dm)
            assert turn.session in root["message"] and f"thread {root['id']}" in err
            answer = [p["message"] for p in h.thread(root["id"]) if p["root_id"]]
            assert answer == ["**Job morning-notes** answered:\n\n"
                              "Three notes changed since yesterday."]

    run(scenario())


def test_a_failed_job_run_tells_the_owner_why_and_exits_1(fake, tmp_path):
    async def scenario():
        async with running(fake) as h:
            h.loop.busy_next = 1  # loopd refuses the turn
            status, _out, err = await job_run(h, tmp_path, "nightly", "Anything new?")
            assert status == 1 and "session_busy" in err
            (root,) = roots_in(h, h.dm)
            (told,) = [p["message"] for p in h.thread(root["id"]) if p["root_id"]]
            assert told.startswith("**Job nightly** failed (session_busy)")

    run(scenario())
