"""loopd's per-turn harness overhead, for sessions of 10, 1,000 and 10,000 records.

    uv run python bench/loop_bench.py            # prints the table and writes it to
                                                 # the bench:loop section of docs/performance.md

For each size a session log is written with that many records, then turns are driven over a real
loop.sock against a fake llama-server (an httpx transport inside loopd's process, answering at
once), through the real inference client. Two spans are measured per turn:

- in:  from the channel writing its ``turn`` frame to the fake server receiving the request
       (opening the session, appending the user record durably, building and encoding the
       request, the client's work);
- out: from the fake server's last byte to the channel reading ``turn_done`` (assembling the
       completion, appending assistant and usage durably, the final frame).

The first turn opens the session from disk (the log is read and parsed once); later turns use
the session kept in memory. Beside them, a direct client's *in*: an OpenAI-style client holding
the same messages as plain dicts, from its call to the same fake receiving the request (httpx
encoding the body), so *added* is what Boxmaker costs over what any client pays. Not part of
the tests: timings depend on the machine and its load.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from bxcore.chat import UserMessage, message_json
from bxcore.config.inference import InferenceSection, SlotSection
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn
from bxcore.records import Assistant, Usage, User
from loopd.baseline import Baseline
from loopd.inference.client import InferenceClient
from loopd.log import encode_record
from loopd.replay import messages
from loopd.sessions import Sessions
from loopd.sockets import handler
from loopd.store import SessionStore
from loopd.tools import Registry, ToolRunner
from loopd.turn import Loop
from loopd.wiring import DEFAULT_SYSTEM

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from report import load_note, machine_line, today, write_section
from support.fake_tools import FakeTools  # the design's clock and echo, a test double

REPO = Path(__file__).resolve().parents[1]
SIZES = (10, 1_000, 10_000)
WARM_TURNS = 15
TIME = "2026-09-18T12:00:00.000000Z"


class TimedServer:
    """Answers every chat request at once with a short completion; notes when the request
    arrived and when the last byte of the answer went out."""

    def __init__(self) -> None:
        self.arrived = 0.0
        self.last_byte = 0.0
        self.cache = 0

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.arrived = time.perf_counter()
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=_Answer(self))


class _Answer(httpx.AsyncByteStream):
    def __init__(self, server: TimedServer):
        self._server = server

    async def __aiter__(self) -> AsyncIterator[bytes]:
        cache = self._server.cache
        chunks = ('{"id":"b","choices":[{"index":0,"delta":{"content":"ok"}}]}',
                  '{"id":"b","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
                  '{"id":"b","choices":[],"timings":{"cache_n":%s,"prompt_n":5,"predicted_n":1}}'
                  .replace("%s", str(cache)))
        for data in chunks:
            yield f"data: {data}\n\n".encode()
        self._server.cache += 6
        self._server.last_byte = time.perf_counter()
        yield b"data: [DONE]\n\n"


def write_session(home: Path, records: int, baseline: Baseline) -> None:
    """A session log of ``records`` records: session_start, then user/assistant/usage."""
    SessionStore(home).create("bench", baseline, slot=0, time=TIME)
    log = home / "sessions" / "bench" / "0.jsonl"
    lines = []
    for index in range(records - 1):
        kind = index % 3
        if kind == 0:
            lines.append(encode_record(User(time=TIME, content=f"message {index} " * 8)))
        elif kind == 1:
            lines.append(encode_record(Assistant(time=TIME, content=f"answer {index} " * 12,
                                                 reasoning_content=None, tool_calls=None)))
        else:
            lines.append(encode_record(Usage(time=TIME, cache_n=0, prompt_n=0, predicted_n=0,
                                             reasoning_tokens=0, thinking_capped=False)))
    with log.open("ab") as out:
        out.write(b"".join(lines))


def direct_body(home: Path, baseline: Baseline) -> dict[str, object]:
    """What a direct client sends: the session's messages as plain dicts, built once, before any
    clock starts."""
    records = SessionStore(home).open("bench").records
    return {"messages": [message_json(m) for m in messages(baseline, records)]
            + [message_json(UserMessage(content="t"))],
            "tools": [tool.as_openai_tool() for tool in baseline.tools], "stream": True}


async def direct_in(client: httpx.AsyncClient, fake: TimedServer, body: dict[str, object]) -> float:
    """ms from a direct client's call to the fake receiving the request (httpx encodes the body)."""
    sent = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for _line in response.aiter_lines():
            pass
    return (fake.arrived - sent) * 1000


async def boxmaker_turn(path: Path, fake: TimedServer, turn: int) -> tuple[float, float]:
    """(in, out) in ms of one turn over loop.sock."""
    stream = await FrameStream.connect(path, wire.FROM_LOOPD)
    sent = time.perf_counter()
    await stream.write(Frame.of(wire.TURN, Turn(session="bench", content=f"t{turn}", resume=True),
                                final=False))
    frame = await stream.read(timeout=60)
    while not frame.final:
        frame = await stream.read(timeout=60)
    done = time.perf_counter()
    await stream.close()
    assert frame.kind == wire.TURN_DONE, frame.body
    return (fake.arrived - sent) * 1000, (done - fake.last_byte) * 1000


Result = tuple[tuple[float, float], tuple[float, float], float, float]


async def measure(records: int) -> Result:
    """((cold in, cold out), (warm in median, warm out median), direct in median, added median),
    in ms. Each later turn is paired with a direct client's request made right before or after
    it (alternating), and *added* is the median of the pairs' differences, so load from other
    work on the machine shows up as spread, not as a bias to one side."""
    with tempfile.TemporaryDirectory(prefix="bx-bench-") as tmp:
        home = Path(tmp)
        registry = Registry(FakeTools.schemas)
        baseline = Baseline(system=DEFAULT_SYSTEM.read_text().strip(),
                            tools=registry.core_schemas())
        write_session(home, records, baseline)
        body = direct_body(home, baseline)
        fake, direct_fake = TimedServer(), TimedServer()
        client = InferenceClient(InferenceSection(), transport=httpx.MockTransport(fake.handle))
        direct = httpx.AsyncClient(transport=httpx.MockTransport(direct_fake.handle),
                                   base_url="http://llama")
        loop = Loop(inference=client, tools=ToolRunner(registry, FakeTools()))
        async def same_baseline(_session: str, _epoch: int, _summary: str | None) -> Baseline:
            return baseline

        server = Sessions(store=SessionStore(home), loop=loop, new_baseline=same_baseline,
                          slots=SlotSection())
        path = home / "loop.sock"
        listener = await asyncio.start_unix_server(handler(server), path=str(path))
        try:
            cold = await boxmaker_turn(path, fake, 0)
            await direct_in(direct, direct_fake, body)  # the direct client's warm-up
            warm, directs = [], []
            for turn in range(1, 1 + WARM_TURNS):
                if turn % 2:
                    warm.append(await boxmaker_turn(path, fake, turn))
                    directs.append(await direct_in(direct, direct_fake, body))
                else:
                    directs.append(await direct_in(direct, direct_fake, body))
                    warm.append(await boxmaker_turn(path, fake, turn))
        finally:
            listener.close()
            await listener.wait_closed()
            await client.aclose()
            await direct.aclose()
    return cold, (statistics.median(s[0] for s in warm),
                  statistics.median(s[1] for s in warm)), statistics.median(directs), \
        statistics.median(s[0] - d for s, d in zip(warm, directs, strict=True))


def table(results: dict[int, Result]) -> str:
    rows = ["| records in the session | first turn: in / out (ms) | later turns: in / out "
            f"(ms, median of {WARM_TURNS}) | direct client: in (ms) | added: in (ms) |",
            "|---:|---:|---:|---:|---:|"]
    for size, ((cold_in, cold_out), (warm_in, warm_out), direct, added) in results.items():
        rows.append(f"| {size:,} | {cold_in:.1f} / {cold_out:.1f} | {warm_in:.1f} / "
                    f"{warm_out:.1f} | {direct:.1f} | {added:.1f} |")
    return "\n".join(rows)


def growth(results: dict[int, Result]) -> str:
    """What this run measured between the smallest and the largest session, in words."""
    small, large = min(results), max(results)
    (cold_s, _), _, direct_s, added_s = results[small]
    (cold_l, _), _, direct_l, added_l = results[large]
    return (f"From {small:,} to {large:,} records in this run: *added* {added_s:.1f} to "
            f"{added_l:.1f} ms ({added_l - added_s:+.1f} ms), the *direct client* "
            f"{direct_s:.1f} to {direct_l:.1f} ms ({direct_l - direct_s:+.1f} ms), the first "
            f"turn's *in* {cold_s:.1f} to {cold_l:.1f} ms ({cold_l - cold_s:+.1f} ms).")


def main() -> None:
    results = {size: asyncio.run(measure(size)) for size in SIZES}
    body = "\n".join([
        "## loopd: per-turn harness overhead (bench/loop_bench.py)",
        "",
        f"Measured {today()} on {machine_line()}; {load_note()} at the end.",
        "",
        "*in*: the channel's `turn` frame to the request's first byte at a fake llama-server; "
        "*out*: the server's last byte to the channel reading `turn_done`. Over a real "
        "loop.sock, through the real inference client, with durable appends (fsync). The first "
        "turn opens the session from disk (reads and parses the whole log once); later turns "
        "use the records kept in memory. *direct client*: the same messages as plain dicts, sent "
        "by httpx to the same fake (the encoding any client pays); *added*: the median, over "
        "the later turns, of the turn's *in* minus a direct request made right before or after "
        "it. The machine is shared with other work: compare rows, not machines.",
        "",
        table(results),
        "",
        growth(results),
    ])
    print(body)
    if "--no-write" not in sys.argv:
        write_section("loop", body)


if __name__ == "__main__":
    main()
