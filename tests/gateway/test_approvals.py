"""Approvals in the thread: brokerd asks on gateway.sock, the owner answers with !approve or
!deny in the session's thread; anyone else, another thread, an unknown or used id is refused with
a reply saying so."""

from __future__ import annotations

import asyncio
import json
import secrets

from bxcore.display import describe_call
from bxcore.protocol.approval import APPROVAL_ANSWER, ApprovalAnswer, ApprovalRequest

from .harness import run, running, until
from .scripted import ask_approval


def request_for(session: str) -> ApprovalRequest:
    return ApprovalRequest(
        id=secrets.token_hex(8), session=session, tool="shell",
        arguments=json.dumps({"command": "rm -rf ~/tmp/build"}), arguments_sha256="sha256:00",
        grant="shell.toml", expires="2026-12-01T00:00:00Z",
    )


def bot_says(h, root: str) -> list[str]:
    return [p["message"] for p in h.thread(root) if p["user_id"] == h.bot]


def test_an_approval_round_trip_in_the_sessions_thread(fake):
    async def scenario():
        async with running(fake) as h:
            root = fake.user_posts(h.owner, h.dm, "clean the build dir")
            await until(lambda: len(h.loop.turns) == 1)
            request = request_for(f"mm-{root}")
            asked = asyncio.create_task(ask_approval(h.gateway.settings.gateway_socket, request))
            await until(lambda: any("Approval needed" in m for m in bot_says(h, root)))
            shown = next(m for m in bot_says(h, root) if "Approval needed" in m)
            # what will run, as bxcore.display shows it to the owner
            assert describe_call(request.tool, request.arguments) in shown
            fake.user_posts(h.owner, h.dm, f"!approve {request.id}", root_id=root)
            frame = await asyncio.wait_for(asked, 15)
            assert frame.kind == APPROVAL_ANSWER and frame.final
            answer = frame.parse(ApprovalAnswer)
            assert (answer.id, answer.verdict, answer.by) == (request.id, "approve", h.owner)
            await until(lambda: any("approved" in m for m in bot_says(h, root)))

            # the same id again is refused: it has been used
            fake.user_posts(h.owner, h.dm, f"!deny {request.id}", root_id=root)
            await until(lambda: any("already answered" in m for m in bot_says(h, root)))
            assert [t.content for t in h.loop.turns] == ["clean the build dir"]

    run(scenario())


def test_wrong_thread_unknown_id_and_strangers_are_refused_with_a_reply(fake):
    async def scenario():
        ops = fake.data.add_channel("O", "ops", set())
        async with running(fake, channels=frozenset({ops["id"]})) as h:
            stranger, _ = fake.add_user("stranger")
            fake.data.members[ops["id"]] = {h.bot, h.owner, stranger}
            root = fake.user_posts(h.owner, ops["id"], "deploy please")
            await until(lambda: len(h.loop.turns) == 1)
            other = fake.user_posts(h.owner, h.dm, "another thread")
            await until(lambda: len(h.loop.turns) == 2)
            request = request_for(f"mm-{root}")
            asked = asyncio.create_task(ask_approval(h.gateway.settings.gateway_socket, request))
            await until(lambda: any("Approval needed" in m for m in bot_says(h, root)))

            fake.user_posts(stranger, ops["id"], f"!approve {request.id}", root_id=root)
            await until(lambda: any("not allowed" in m for m in bot_says(h, root)))
            fake.user_posts(h.owner, h.dm, f"!approve {request.id}", root_id=other)
            await until(lambda: any("its own thread" in m for m in bot_says(h, other)))
            fake.user_posts(h.owner, ops["id"], "!approve nosuchid", root_id=root)
            await until(lambda: any("no approval `nosuchid`" in m for m in bot_says(h, root)))
            assert not asked.done()

            fake.user_posts(h.owner, ops["id"], f"!deny {request.id}", root_id=root)
            answer = (await asyncio.wait_for(asked, 15)).parse(ApprovalAnswer)
            assert (answer.verdict, answer.by) == ("deny", h.owner)

    run(scenario())


def test_an_approval_brokerd_gives_up_on_expires_and_is_then_refused(fake):
    async def scenario():
        async with running(fake) as h:
            root = fake.user_posts(h.owner, h.dm, "do it")
            await until(lambda: len(h.loop.turns) == 1)
            request = request_for(f"mm-{root}")
            asked = asyncio.create_task(ask_approval(h.gateway.settings.gateway_socket, request))
            await until(lambda: any("Approval needed" in m for m in bot_says(h, root)))
            asked.cancel()  # brokerd closes the connection: the approval expired
            await until(lambda: any("expired" in m for m in bot_says(h, root)))
            fake.user_posts(h.owner, h.dm, f"!approve {request.id}", root_id=root)
            await until(lambda: any("already answered or has expired" in m
                                    for m in bot_says(h, root)))

    run(scenario())
