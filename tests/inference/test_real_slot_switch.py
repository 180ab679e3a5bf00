"""Sessions that take turns on one slot, on the real llama-server router through inferproxy: a new
session processes only its own tokens, and a session that comes back only its new ones
(docs/decisions/new-thread-on-the-baseline.md).

The mechanism: every session's prompt is the shared baseline, then its marker, then its own
messages. A new session finds the baseline in the slot (or the RAM cache) and processes the rest.
With ``--slot-prompt-similarity 1`` (serving/presets.ini) the server never reuses a slot in place
for a request that shares only part of the held prompt: it saves the held session into its
host-RAM cache first and loads the incoming one from there if it holds it. New threads and returns
in generated orders: test_real_new_thread.py. The first test here shows why the similarity must
be 1; the others are Boxmaker's own
requests (``InferenceClient``): long and short sessions, two and many, a request another client
sent on the slot, and a new client in place of the old one (what a loopd restart amounts to for
the server; tests/loop/test_real_slot_switch.py restarts a real loopd).

"Re-read" is what the session held in the slot after its previous completion that the new
request did not find cached; it may be up to ``SLACK`` tokens (the server always evaluates the
last token again). Prompts start with a nonce: the RAM cache outlives a test.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from bxcore.chat import SystemMessage, UserMessage
from bxcore.config import InferenceSection
from faults.profile import long_only
from loopd.inference import ChatRequest, Completion, InferenceClient
from loopd.inference.markers import MarkerBook
from loopd.inference.passed import PassedProbes
from loopd.inference.slot_switch import SLACK, reread_tokens, slot_switch_check, slot_switch_once
from support.llama import (
    PRESETS,
    QWEN,
    SMOL,
    TEMPLATES,
    LlamaServer,
    llama_paths,
    nonce,
    proxied,
    require_llama,
    start_router,
)

from .test_client import Sink

pytestmark = [pytest.mark.real_server, pytest.mark.anyio]

# The smallest model: slot selection and the host-RAM cache work on tokens, whatever model
# makes them, and these tests send no tools; on SmolLM2 the file takes about half the time
# (docs/decisions/test-suite.md).
MODEL = "smol"
MAIN = 0
# About 560 tokens every session starts with, as Boxmaker's sessions share their baseline.
BASELINE = "You are a terse assistant. " + " ".join(
    f"Rule {n}: keep each answer to one short line, and say so when you do not know."
    for n in range(28)
)


def long_text(topic: str, sentences: int = 60) -> str:
    """About 16 tokens a sentence: what a long first message (a pasted document) brings."""
    return " ".join(f"Note {n} on {topic}: the {topic} was checked on day {n} and found fine."
                    for n in range(sentences))


@dataclass
class Thread:
    """One session as Boxmaker sends it: the whole message array every time, pinned to MAIN."""

    session: str
    system: str
    messages: list[Any] = field(default_factory=list)
    last: Completion | None = None
    rereads: list[int] = field(default_factory=list)  # one per request after the first
    marker: str | None = None  # loopd's choice, apart from every thread's before (MARKED)

    async def say(self, client: InferenceClient, text: str) -> Completion:
        if not self.messages:
            self.messages.append(SystemMessage(content=self.system))
            self.marker = await MarkerBook(client.tokenize, MARKED).new(self.session, text)
            MARKED.append((self.session, self.marker, text))
        self.messages.append(UserMessage(content=text))
        request = ChatRequest(messages=tuple(self.messages), tools=(), slot=MAIN,
                              session=self.session, marker=self.marker, max_tokens=6,
                              tool_choice="none")
        done = await client.chat(request, Sink())
        if self.last is not None:
            self.rereads.append(reread_tokens(self.last, done))
        self.messages.append(done.message())
        self.last = done
        return done


# Every thread's marker so far, oldest first: each new one differs at its key from these, as
# loopd's book keeps the markers of the sessions it served last.
MARKED: list[tuple[str, str, str]] = []


def client(proxy: Path) -> InferenceClient:
    return InferenceClient(InferenceSection(model=MODEL), socket=proxy)


def raw_chat(server: LlamaServer, system: str, user: str) -> dict[str, Any]:
    """A request without Boxmaker's marker, as another client (or Boxmaker before) sends it."""
    response = server.post("/v1/chat/completions", {
        "model": MODEL, "id_slot": MAIN, "cache_prompt": True, "max_tokens": 4,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    })
    assert response.status_code == 200, response.text
    return response.json()["timings"]


@long_only("a router of its own at the default similarity; it shows why the presets set 1, "
           "which every other test here runs with")
async def test_at_the_default_similarity_a_short_session_was_lost():
    """Why the presets say --slot-prompt-similarity 1: at the default 0.10, a held session that
    is mostly the shared baseline is reused in place by the next session and re-read on return."""
    shared = f"{nonce()} {BASELINE}"
    a, b = Thread("default-a", shared), Thread("default-b", shared)
    with start_router("--slot-prompt-similarity", "0.10") as server, \
            proxied(server.socket) as proxy:
        async with client(proxy) as inference:
            await a.say(inference, "Name a colour.")
            await b.say(inference, long_text("roof", 10))
            await b.say(inference, "Thanks.")
            await a.say(inference, "Another.")
    assert a.rereads[0] > SLACK, a.rereads  # its marker and message, read again


async def test_two_long_sessions_take_turns_and_each_reads_only_what_is_new(
    llama_router_proxy: Path
):
    a = Thread("long-a", f"{nonce()} {BASELINE}")
    b = Thread("long-b", a.system)
    async with client(llama_router_proxy) as inference:
        await a.say(inference, long_text("garden"))
        await b.say(inference, long_text("boat"))
        for turn in range(2):
            await a.say(inference, f"Which day is note {turn} about?")
            await b.say(inference, f"Which day is note {turn + 1} about?")
    assert a.last is not None and a.last.cache_n > 1500  # long: far above the baseline
    assert len(a.rereads) == len(b.rereads) == 2
    assert max(a.rereads + b.rereads) <= SLACK, (a.rereads, b.rereads)


async def test_short_sessions_that_are_mostly_the_baseline_come_back_whole(
    llama_router_proxy: Path
):
    a = Thread("short-a", f"{nonce()} {BASELINE}")
    b = Thread("short-b", a.system)
    async with client(llama_router_proxy) as inference:
        for question in ("Name a colour.", "Name another.", "And one more."):
            await a.say(inference, question)
            await b.say(inference, question.replace("colour", "fruit"))
    assert len(a.rereads) == len(b.rereads) == 2
    assert max(a.rereads + b.rereads) <= SLACK, (a.rereads, b.rereads)


@long_only("18 s in CI; loopd's interleaved threads (tests/loop/test_real_slot_switch.py) and "
           "the day bench cover many threads on one slot")
async def test_many_sessions_round_robin_on_one_slot(llama_router_proxy: Path):
    system = f"{nonce()} {BASELINE}"
    threads = [Thread(f"many-{n}", system) for n in range(6)]
    async with client(llama_router_proxy) as inference:
        for thread, topic in zip(threads, ("bees", "taxes", "car", "books", "bikes", "camera"),
                                 strict=True):
            await thread.say(inference, long_text(topic, 8))
        for round_ in range(2):
            for thread in threads:
                await thread.say(inference, f"Round {round_}: one word, please.")
    rereads = [thread.rereads for thread in threads]
    assert all(len(r) == 2 and max(r) <= SLACK for r in rereads), rereads


async def test_a_request_another_client_sent_on_the_slot_does_not_cost_the_session(
    llama_router: LlamaServer, llama_router_proxy: Path
):
    a = Thread("foreign-a", f"{nonce()} {BASELINE}")
    async with client(llama_router_proxy) as inference:
        await a.say(inference, long_text("printer", 20))
        # Another client of the shared server: its own system prompt, pinned to our slot...
        raw_chat(llama_router, f"{nonce()} You translate to French.", long_text("vin", 10))
        await a.say(inference, "Is the printer fine?")
        # ...and one without a slot, which the server gives to the least recently used one.
        response = llama_router.post("/v1/chat/completions", {
            "model": MODEL, "max_tokens": 4, "cache_prompt": True,
            "messages": [{"role": "user", "content": f"{nonce()} {long_text('pain', 10)}"}],
        })
        assert response.status_code == 200, response.text
        await a.say(inference, "And the day of note 3?")
    assert max(a.rereads) <= SLACK, a.rereads


@long_only("9 s in CI; tests/loop/test_real_slot_switch.py restarts loopd between turns")
async def test_a_new_client_for_the_same_sessions_finds_them(llama_router_proxy: Path):
    """What a loopd restart is to the server: the same sessions' requests, rebuilt from the log
    by another process (new message objects, a new connection)."""
    a = Thread("restart-a", f"{nonce()} {BASELINE}")
    b = Thread("restart-b", a.system)
    async with client(llama_router_proxy) as inference:
        await a.say(inference, long_text("firewood", 30))
        await b.say(inference, long_text("garage", 30))
    for thread in (a, b):
        thread.messages = [m.model_copy(deep=True) for m in thread.messages]
    async with client(llama_router_proxy) as again:
        await a.say(again, "Still there?")
        await b.say(again, "Still there?")
    assert max(a.rereads + b.rereads) <= SLACK, (a.rereads, b.rereads)


async def test_the_self_test_check_passes_on_the_default_settings(llama_router_proxy: Path):
    async with client(llama_router_proxy) as inference:
        check = await slot_switch_check(inference)
    assert check.ok, check.detail


async def test_the_self_test_check_names_the_flag_a_server_turned_off():
    with start_router("--cache-ram", "0") as server, proxied(server.socket) as proxy:
        async with client(proxy) as inference:
            check = await slot_switch_check(inference)
    assert not check.ok
    assert "runs with --cache-ram 0" in check.detail, check.detail
    assert "set --cache-ram 8192" in check.detail


TOOLS = "qwen-tools"  # a preset whose template is a file of its own, not the model's


@contextlib.contextmanager
def _models_by_file() -> Iterator[Path]:
    """A router's directory whose models/ holds one symlink per file, so a test can put another
    file under a model's name."""
    _, models = require_llama()
    directory = Path(tempfile.mkdtemp(prefix="bx-llama-"))
    (directory / "models").mkdir()
    for model in models.iterdir():
        (directory / "models" / model.name).symlink_to(model)
    (directory / "templates").symlink_to(TEMPLATES)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def _serve_counting(directory: Path, chats: list[str], *flags: str
                          ) -> AsyncIterator[InferenceClient]:
    """A router started afresh in ``directory`` (the presets, ``flags`` on every model), and a
    client of its ``qwen-tools`` whose chat requests are appended to ``chats``."""
    server = LlamaServer(["--models-preset", str(PRESETS), "--models-max", "3", "--offline",
                          *flags], directory)
    try:
        server.start()
        with proxied(server.socket) as proxy:
            async with InferenceClient(InferenceSection(model=TOOLS), socket=proxy) as inference:
                chat = inference.chat

                async def counting(request, sink):  # type: ignore[no-untyped-def]
                    chats.append(request.session)
                    return await chat(request, sink)

                inference.chat = counting  # type: ignore[method-assign]
                yield inference
    finally:
        server.stop()


async def test_the_check_is_sent_once_per_server_model_file_and_flags():
    """``loopd serve``'s ``slot_switch`` with a record of passes (docs/decisions/
    slot-switch-once-per-server.md): a restarted router with the same build, model file and flags
    is sent no request; a record never stands for a router launched with a flag that breaks the
    switch (the check runs and fails), nor for another file under the model's path (it runs
    again). What else makes a new key: tests/loop/test_passed_probes.py."""
    with _models_by_file() as directory:
        passed = PassedProbes(directory / "selftest-passed.json")
        chats: list[list[str]] = [[] for _ in range(4)]
        async with _serve_counting(directory, chats[0]) as inference:
            first = await slot_switch_once(inference, passed)
        async with _serve_counting(directory, chats[1]) as inference:
            again = await slot_switch_once(inference, passed)
        async with _serve_counting(directory, chats[2], "--cache-ram", "0") as inference:
            broken = await slot_switch_once(inference, passed)
        # qwen-tools names its template file: only the model file is other
        (directory / "models" / QWEN).unlink()
        (directory / "models" / QWEN).symlink_to(llama_paths()[1] / SMOL)
        async with _serve_counting(directory, chats[3]) as inference:
            other_file = await slot_switch_once(inference, passed)
    assert first.ok and not first.detail.startswith("passed on"), first.detail
    assert again.ok and again.detail.startswith("passed on this server"), again.detail
    assert not broken.ok and "runs with --cache-ram 0" in broken.detail, broken.detail
    assert not other_file.detail.startswith("passed on"), other_file.detail
    assert [len(sent) for sent in chats] == [3, 0, 3, 3], chats
