"""Compaction on the real llama-server (the session's router: its qwen-tools is the tiny Qwen with
the bare-JSON tool template) with the real memoryd: loopd's Sessions and inference client,
nothing scripted but when to compact.

Two turns in epoch 0, with a memory write made between them (as brokerd sends it); then the slot
limit is set so that the next turn compacts first. The turn after compaction builds a new cache
(``cache_n`` small: the prefix is new) and the turn after that hits it; the write shows in epoch
1's baseline and not in epoch 0's; and each epoch's requests, as the server got them, are exactly
``messages(baseline file, log)`` of that epoch: replay stays exact.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from bxcore.chat import message_json
from bxcore.config.inference import InferenceSection, SlotSection
from bxcore.protocol.loop import Turn
from bxcore.records import Assistant, Usage
from loopd.baseline import Baseline
from loopd.epochs import Baselines, EpochSettings
from loopd.inference.client import InferenceClient
from loopd.log import parse_log
from loopd.memory import MemoryLink
from loopd.replay import messages
from loopd.sessions import Sessions
from loopd.store import SessionStore
from loopd.tools import Registry, ToolRunner
from loopd.turn import Loop
from support.fake_tools import FakeTools
from support.llama import LlamaServer, nonce

from .memoryd_process import running_memoryd
from .support import Events, final_frame

pytestmark = [pytest.mark.real_server, pytest.mark.anyio]

SESSION = "epochs"


class Recording:
    """The real client, remembering each request's messages as they were sent."""

    def __init__(self, client: InferenceClient):
        self.client = client
        self.sent: list[list[dict]] = []

    async def chat(self, request, events):
        self.sent.append([message_json(m) for m in request.messages])
        return await self.client.chat(request, events)


def replayed_requests(directory: Path, epoch: int) -> list[list[dict]]:
    """Every request of one epoch rebuilt from its files: before each completion, the messages
    of the baseline and the records up to it."""
    baseline = Baseline.load(directory / f"{epoch}.baseline.json")
    log = directory / f"{epoch}.jsonl"
    records = parse_log(log.read_bytes(), str(log), session=SESSION, epoch=epoch)
    return [[message_json(m) for m in messages(baseline, records[:index])]
            for index, record in enumerate(records) if isinstance(record, Assistant)]


def usages(directory: Path, epoch: int) -> list[Usage]:
    log = directory / f"{epoch}.jsonl"
    return [r for r in parse_log(log.read_bytes(), str(log), session=SESSION, epoch=epoch)
            if isinstance(r, Usage)]


async def test_an_epoch_change_on_the_real_server(llama_router: LlamaServer):
    with tempfile.TemporaryDirectory(prefix="bx-epoch-") as tmp:
        root = Path(tmp)
        (root / "home" / "memory").mkdir(parents=True)
        (root / "home" / "memory" / "soul.md").write_text(f"{nonce()} I am brief and calm.")
        system = root / "system.md"
        system.write_text("You are a test assistant. Answer in one short sentence.")
        with running_memoryd(root) as memoryd:
            section = InferenceSection(model="qwen-tools", max_tokens=24, liveness_timeout=600.0,
                                       retries=1)
            client = InferenceClient(section, socket=llama_router.socket)
            recording = Recording(client)
            memory = MemoryLink(memoryd.socket)
            registry = Registry(FakeTools.schemas)
            server = Sessions(
                store=SessionStore(root / "home"),
                loop=Loop(inference=recording, tools=ToolRunner(registry, FakeTools())),
                new_baseline=Baselines(system=system, tools=registry.core_schemas(),
                                       memory=memory),
                slots=SlotSection(), memory=memory,
                epochs=EpochSettings(summary_tokens=48),
            )

            async def say(text: str, resume: bool = True) -> None:
                final = await final_frame(server.run(
                    Turn(session=SESSION, content=text, resume=resume, tool_choice=["none"]),
                    Events(),
                ))
                assert final.kind == "turn_done", final.body

            try:
                await say("Hello, who are you?", resume=False)
                memoryd.write(SESSION, {"action": "add", "file": "memory.md",
                                        "text": "The owner's CI runs on Fridays."})
                await say("What colour is the sky?")
                server.epochs = EpochSettings(compact_at_tokens=1, summary_tokens=48)
                await say("And the grass?")  # compacts first, then runs in epoch 1
                server.epochs = EpochSettings(summary_tokens=48)
                await say("Thank you.")
            finally:
                await client.aclose()
                await memory.aclose()
        directory = root / "home" / "sessions" / SESSION
        epoch0 = Baseline.load(directory / "0.baseline.json")
        epoch1 = Baseline.load(directory / "1.baseline.json")
        replays = (replayed_requests(directory, 0), replayed_requests(directory, 1))
        before, after = usages(directory, 0), usages(directory, 1)

    assert "I am brief and calm." in epoch0.system and "I am brief and calm." in epoch1.system
    assert "Fridays" not in epoch0.system  # written during epoch 0: not before its end
    assert "Fridays" in epoch1.system
    assert epoch1.summary and epoch0.summary is None
    # Replay is exact for both epochs: what the server got, request by request.
    assert recording.sent == [*replays[0], *replays[1]]
    assert len(replays[0]) == 3  # two turns and the summary
    # The summary reused epoch 0's cache: its request only added the instruction.
    assert before[2].cache_n >= 0.9 * (before[1].cache_n + before[1].prompt_n
                                       + before[1].predicted_n)
    # The first turn of epoch 1 built a new cache; the next one hit it.
    first, second = after
    assert first.cache_n < 0.5 * (first.cache_n + first.prompt_n)
    assert second.cache_n >= 0.9 * (first.cache_n + first.prompt_n + first.predicted_n)
