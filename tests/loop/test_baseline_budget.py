"""The baseline budget holds for every baseline loopd builds: a new session's, a new epoch's, and
so one built after a memory edit, through the real ``Sessions`` and identity files on disk.

Offline (no model server), the tokenizer is a stand-in that counts UTF-8 bytes of the same texts
the server would render: the property is about where the check runs and what a refusal says,
and it holds for any counter. tests/inference/test_real_budget.py judges the same objects by
the real llama-server's template and tokenizer.

Property, over generated identity file sizes and budgets: a new session (or epoch) is refused
exactly when its baseline counts over the budget; the refusal names the system prompt, the tools
and each identity file with the counter's own figure for it, and nothing is written for it; a
session refused its next epoch stays closed and gets it once the file is short again.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio
from bxcore.canonical import canonical_json
from bxcore.chat import ChatMessage, ToolSchema
from bxcore.config.inference import SlotSection
from bxcore.memory_tool import join_entries, split_entries
from bxcore.protocol.loop import Turn
from hypothesis import given, settings
from hypothesis import strategies as st
from loopd.baseline import SUMMARY_HEADING, Identity, IdentityPart
from loopd.budget import BaselineBudget
from loopd.epochs import Baselines, EpochSettings, cut_summary
from loopd.identity_writes import ENTRY_TOKENS, IdentityWrites
from loopd.inference.errors import Unavailable
from loopd.memory import IdentityFiles
from loopd.sessions import Sessions
from loopd.store import SessionStore

from .support import Events, ScriptedInference, fake_registry, final_frame, make_loop, say

SYSTEM = "Be brief and careful."
FILES = ("soul.md", "memory.md", "user.md")
TEMPLATE = 7  # the stand-in's tokens for the chat template around the system message


class ByteTokens:
    """A stand-in tokenizer: one token per UTF-8 byte, the tools as their canonical JSON."""

    def __init__(self) -> None:
        self.down = False

    async def baseline(self, system: str, tools: tuple[ToolSchema, ...]) -> int:
        if self.down:
            raise Unavailable("the model server is loading")
        schemas = canonical_json([tool.as_openai_tool() for tool in tools]) if tools else b""
        return TEMPLATE + len(system.encode()) + len(schemas)

    async def messages(self, messages: Sequence[ChatMessage], tools: tuple[ToolSchema, ...]
                       ) -> int:
        texts = "".join(str(message.content) for message in messages)
        return await self.baseline(texts, tools)

    async def text(self, text: str) -> int:
        return len(text.encode())


def baselines(home: Path, limit: int, counter: ByteTokens) -> Baselines:
    system = home / "system.md"
    system.write_text(SYSTEM)
    return Baselines(system=system, tools=fake_registry().core_schemas(),
                     memory=IdentityFiles([home / name for name in FILES]),
                     budget=BaselineBudget(counter=counter, limit=limit))


def server(home: Path, limit: int, counter: ByteTokens, script: list) -> Sessions:
    built = baselines(home, limit, counter)
    return Sessions(store=SessionStore(home), loop=make_loop(ScriptedInference(script)),
                    new_baseline=built, slots=SlotSection(main=0, background=1),
                    memory=built.memory, epochs=EpochSettings(compact_at_tokens=20,
                                                              summary_tokens=9))


def write_identity(home: Path, sizes: tuple[int, ...]) -> dict[str, str]:
    written = {}
    for name, size in zip(FILES, sizes, strict=True):
        text = (f"{name} says: " + "é and words " * size)[: max(size, 0)].strip()
        (home / name).write_text(text)
        if text:
            written[name] = text
    return written


async def counted(home: Path, counter: ByteTokens) -> int:
    """The stand-in's count of the baseline a new session gets now."""
    baseline, _ = await baselines(home, 1, counter).build("probe", 0, None)
    return await counter.baseline(baseline.system, tuple(baseline.tools))


def assert_names_each_part(message: str, files: dict[str, str]) -> None:
    tools = fake_registry().core_schemas()
    schemas = len(canonical_json([tool.as_openai_tool() for tool in tools]))
    assert f"system prompt {len(SYSTEM.encode()):,} tokens ({len(SYSTEM)} characters)" in message
    assert f"tools {schemas:,} tokens ({len(tools)} schemas)" in message
    parts = message.split("tokenizer: ")[1]
    for name in FILES:  # each file in the baseline with its own figure; an empty one is none
        text = files.get(name)
        named = re.search(rf"{re.escape(name)} ([\d,]+) tokens \(([\d,]+) characters\)", parts)
        if text is None:
            assert named is None, parts
        else:
            assert named and named.groups() == (f"{len(text.encode()):,}", f"{len(text):,}")


sizes = st.tuples(*(st.integers(0, 1500) for _ in FILES))


@settings(max_examples=40)
@given(sizes=sizes, limit=st.integers(400, 4000))
def test_a_new_session_over_the_budget_is_refused_naming_each_part(sizes, limit):
    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            home, counter = Path(tmp), ByteTokens()
            files = write_identity(home, sizes)
            sessions = server(home, limit, counter, [say("Hi.")])
            total = await counted(home, counter)
            hello = Turn(session="s1", content="hello", resume=False)
            final = await final_frame(sessions.run(hello, Events()))
            if total <= limit:
                assert final.kind == "turn_done", final.body
                return
            assert final.kind == "error" and final.body["code"] == "internal"
            message = final.body["message"]
            assert f"session s1 epoch 0: the baseline is {total:,} tokens, over " \
                f"[inference] baseline_budget = {limit:,}" in message
            assert_names_each_part(message, files)
            assert not SessionStore(home).exists("s1")  # nothing written for it

    anyio.run(check)


@settings(max_examples=15)
@given(grown=st.integers(1, 4000))
def test_a_memory_edit_over_the_budget_refuses_the_next_epoch_until_it_is_short_again(grown):
    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            home, counter = Path(tmp), ByteTokens()
            files = write_identity(home, (40, 0, 0))
            limit = await counted(home, counter) + grown
            sessions = server(home, limit, counter,
                              [say("One."), say("Two."), say("Summary."), say("Three.")])
            first = Turn(session="s1", content="1", resume=False)
            assert (await final_frame(sessions.run(first, Events()))).kind == "turn_done"
            second = Turn(session="s1", content="2", resume=True)
            # After it the slot is over compact_at_tokens: compaction is due.
            assert (await final_frame(sessions.run(second, Events()))).kind == "turn_done"
            # A memory edit: memory.md gets `grown` bytes, the budget's room plus the 2 of the
            # blank line before it.
            files["memory.md"] = "m" * grown
            (home / "memory.md").write_text(files["memory.md"])
            third = Turn(session="s1", content="3", resume=True)
            refused = await final_frame(sessions.run(third, Events()))
            assert refused.kind == "error", refused.body
            assert f"session s1 epoch 1: the baseline is {limit + 2:,} tokens" \
                in refused.body["message"]
            assert_names_each_part(refused.body["message"], files)
            closed = SessionStore(home).open("s1")
            assert closed.epoch == 0 and closed.closed  # compacted; its next epoch not begun
            (home / "memory.md").write_text("")
            done = await final_frame(sessions.run(third, Events()))
            assert done.kind == "turn_done" and done.body["content"] == "Three."
            assert SessionStore(home).open("s1").epoch == 1

    anyio.run(check)


def test_a_server_that_cannot_count_refuses_the_session_as_unavailable(tmp_path):
    async def check() -> None:
        counter = ByteTokens()
        counter.down = True
        sessions = server(tmp_path, 10_000, counter, [say("Hi.")])
        hello = Turn(session="s1", content="hello", resume=False)
        final = await final_frame(sessions.run(hello, Events()))
        assert final.kind == "error" and final.body["code"] == "unavailable"
        assert "cannot be counted by the model server" in final.body["message"]
        assert not SessionStore(tmp_path).exists("s1")

    anyio.run(check)


class ModelWritten(IdentityFiles):
    """memoryd's identity as loopd gets it: memory.md and user.md marked model-written."""

    async def identity(self, session: str, epoch: int) -> Identity:
        files = (await super().identity(session, epoch)).files
        return Identity(tuple(dataclasses.replace(part, model_written=part.name != "soul.md")
                              for part in files))


async def least_with_withholding(built: Baselines, counter: ByteTokens) -> int:
    """The smallest count of the baseline with any of the model-written files withheld."""
    assert built.budget is not None
    identity = await built.memory.identity("probe", 0)
    counts = []
    for withheld in ((), ("memory.md",), ("user.md",), ("memory.md", "user.md")):
        shown = identity
        for part in identity.files:
            if part.name in withheld:
                notice = built.budget.notice(part.name, await counter.text(part.text))
                shown = shown.withholding(part.name, notice)
        baseline = built.assemble(shown, None)
        counts.append(await counter.baseline(baseline.system, tuple(baseline.tools)))
    return min(counts)


@settings(max_examples=40)
@given(sizes=sizes, limit=st.integers(400, 4000))
def test_model_written_files_over_the_budget_are_withheld_not_refused(sizes, limit):
    """A session is refused only when what the owner wrote is over the budget; else it starts,
    its baseline within the budget, each withheld file named in a notice."""
    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            home, counter = Path(tmp), ByteTokens()
            files = write_identity(home, sizes)
            built = dataclasses.replace(
                baselines(home, limit, counter),
                memory=ModelWritten([home / name for name in FILES]))
            least = await least_with_withholding(built, counter)
            sessions = Sessions(store=SessionStore(home), loop=make_loop(ScriptedInference(
                [say("Hi.")])), new_baseline=built, slots=SlotSection(), memory=built.memory)
            hello = Turn(session="s1", content="hello", resume=False)
            final = await final_frame(sessions.run(hello, Events()))
            if least > limit:  # over whatever is withheld: what the owner wrote is too long
                assert final.kind == "error", final.body
                assert "over [inference] baseline_budget" in final.body["message"]
                return
            assert final.kind == "turn_done", final.body
            baseline = SessionStore(home).open("s1").baseline
            assert await counter.baseline(baseline.system, tuple(baseline.tools)) <= limit
            for name in ("memory.md", "user.md"):
                shown = files.get(name, "") in baseline.system
                assert shown or f"## {name}\n[withheld: " in baseline.system

    anyio.run(check)


def test_a_memory_write_that_would_put_the_baseline_over_is_not_sent(tmp_path):
    async def check() -> None:
        counter = ByteTokens()
        write_identity(tmp_path, (40, 0, 0))
        built = baselines(tmp_path, 0, counter)
        now = await counted(tmp_path, counter)
        room = 300
        writes = IdentityWrites(dataclasses.replace(
            built, budget=BaselineBudget(counter=counter, limit=now + room)))
        fits = {"action": "add", "file": "memory.md", "text": "a" * (room - ENTRY_TOKENS)}
        assert await writes.refusal("memory", fits) is None
        over = {**fits, "text": fits["text"] + "a"}
        refusal = await writes.refusal("memory", over)
        assert refusal is not None and refusal.startswith("Not written: memory.md")
        assert f"over its budget of {now + room:,}" in refusal
        assert await writes.refusal("memory", {**over, "action": "remove"}) is None
        assert await writes.refusal("recall", over) is None

    anyio.run(check)


@dataclasses.dataclass
class EntriesMemory:
    """memory.md as memoryd gives it: its entries, and the text the baseline shows."""

    entries: list[str]

    async def identity(self, session: str, epoch: int) -> Identity:
        text = join_entries(self.entries)
        return Identity((IdentityPart(name="memory.md", text=text, model_written=True,
                                      entries=tuple(split_entries(text))),))


edits = st.lists(st.sampled_from(["kept", "rewritten", "moved", "dropped"]), min_size=1,
                 max_size=6)


@settings(max_examples=60)
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=6), fates=edits,
       new_size=st.integers(1, 600), over=st.integers(-200, 600))
def test_a_write_that_shortens_its_file_is_never_refused(sizes, fates, new_size, over):
    """A ``replace`` or ``consolidate`` is refused only if it would leave the baseline over the
    budget and takes out less than it adds: a file the budget withholds can always be made
    shorter, the way it comes back into the prompt (the third attack on issue 32)."""
    entries = [f"{i}: " + "word " * size for i, size in enumerate(sizes)]
    plan = [{"entry": i, "fate": fate, **({"text": "n" * new_size} if fate == "rewritten" else {})}
            for i, fate in zip(range(len(entries)), fates, strict=False)]
    plan += [{"entry": i, "fate": "kept"} for i in range(len(plan), len(entries))]
    target = entries[0]

    async def check() -> None:
        counter = ByteTokens()
        with tempfile.TemporaryDirectory() as home:
            built = dataclasses.replace(baselines(Path(home), 1, counter),
                                        memory=EntriesMemory(entries))
            baseline, _ = await built.build("probe", 0, None)
            now = await counter.baseline(baseline.system, tuple(baseline.tools))
            writes = IdentityWrites(dataclasses.replace(
                built, budget=BaselineBudget(counter=counter, limit=now - over)))
            for call, out in (
                ({"action": "replace", "old_text": target, "text": "n" * new_size}, [target]),
                ({"action": "consolidate", "plan": plan},
                 [entries[step["entry"]] for step in plan if step["fate"] != "kept"]),
            ):
                added = [step["text"] for step in call.get("plan", [call]) if "text" in step]
                if not added:
                    continue
                grows = len("\n".join(added).encode()) > len("\n".join(out).encode())
                after = (now + len("\n".join(added).encode()) + ENTRY_TOKENS
                         - len("\n".join(out).encode()))
                refusal = await writes.refusal("memory", {**call, "file": "memory.md"})
                assert (refusal is not None) == (grows and after > now - over), (call, refusal)

    anyio.run(check)


@settings(max_examples=40)
@given(summary=st.text(min_size=1, max_size=3000), room=st.integers(-50, 2000))
def test_a_summary_is_cut_until_the_epochs_opening_fits(summary, room):
    """The new epoch's opening (baseline and summary) never counts over ``opening_limit``
    when the baseline alone leaves room for the cut's notice; what is kept is the start."""
    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            home, counter = Path(tmp), ByteTokens()
            write_identity(home, (40, 0, 0))
            baseline_tokens = await counted(home, counter)
            built = dataclasses.replace(baselines(home, 100_000, counter),
                                        opening_limit=baseline_tokens + room)
            opened = await built("s1", 1, summary)
            assert opened.summary is not None
            tokens = await counter.messages(opened.opening(), tuple(opened.tools))
            notice = len(cut_summary(summary, 0).encode()) + len(SUMMARY_HEADING) + 2
            if room >= notice:
                assert tokens <= baseline_tokens + room
            kept = opened.summary.split("[cut here: ")[0]
            assert summary.startswith(kept.rstrip()) or opened.summary == summary

    anyio.run(check)
