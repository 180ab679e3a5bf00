"""Benchmark: the inference client straight to llama-server vs through inferproxy.

    uv run python bench/inference_bench.py [--pairs 30]

Not a test. Starts a single-model llama-server (SmolLM2, tests/support/llama.py) and a real
inferproxy in front of it, then runs the same prompts alternately direct and proxied, so that
load from other work on the machine hits both sides alike. Reports per-request latency (time to
the first event and to the whole completion) and the added latency per pair (p50, p95). Then
measures raw bytes/s through the proxy against a local upstream that streams 256 MiB, beside the
same transfer without the proxy. Writes the figures into its own section of docs/performance.md
(between the bench:inference markers), leaving every other section alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402
from bxcore.chat import SystemMessage, UserMessage  # noqa: E402
from bxcore.config import InferenceSection  # noqa: E402
from loopd.inference import ChatRequest, InferenceClient  # noqa: E402
from support.llama import SMOL, proxied, start_single  # noqa: E402

PROMPTS = ["Name a color.", "Name an animal.", "Name a fruit.", "Say hello.", "Count to three."]
TRANSFER = 256 * 1024 * 1024


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def one_request(client: InferenceClient, prompt: str) -> tuple[float, float]:
    """(seconds to the first event, seconds to the whole completion)."""
    first: list[float] = []
    start = time.perf_counter()

    async def sink(_event: object) -> None:
        if not first:
            first.append(time.perf_counter() - start)

    request = ChatRequest(
        messages=(SystemMessage(content="Answer in a few words."), UserMessage(content=prompt)),
        tools=(),
        slot=0,
        session="bench",
        max_tokens=8,
    )
    await client.chat(request, sink)
    return first[0], time.perf_counter() - start


async def latency(llama_socket: Path, proxy_socket: Path, pairs: int) -> dict[str, list[float]]:
    section = InferenceSection(model="smol")
    results: dict[str, list[float]] = {k: [] for k in ("d_first", "d_total", "p_first", "p_total")}
    async with (
        InferenceClient(section, socket=llama_socket) as direct,
        InferenceClient(section, socket=proxy_socket) as through,
    ):
        for prompt in PROMPTS:  # warm the cache for every prompt on both paths
            await one_request(direct, prompt)
            await one_request(through, prompt)
        for i in range(pairs):
            prompt = PROMPTS[i % len(PROMPTS)]
            order = (
                [("d", direct), ("p", through)] if i % 2 == 0 else [("p", through), ("d", direct)]
            )
            for name, client in order:
                first, total = await one_request(client, prompt)
                results[f"{name}_first"].append(first)
                results[f"{name}_total"].append(total)
    return results


def _streaming_upstream(path: Path) -> threading.Thread:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def serve() -> None:
        for _ in range(2):  # one direct transfer, one through the proxy
            conn, _ = listener.accept()
            with conn:
                block = b"x" * (1 << 20)
                for _ in range(TRANSFER // len(block)):
                    conn.sendall(block)
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _drain(path: Path) -> float:
    """Bytes/s reading the whole transfer from a socket."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    start = time.perf_counter()
    received = 0
    while chunk := client.recv(1 << 20):
        received += len(chunk)
    elapsed = time.perf_counter() - start
    client.close()
    assert received == TRANSFER, received
    return received / elapsed


def throughput() -> tuple[float, float]:
    """(direct bytes/s, proxied bytes/s) for a 256 MiB one-way transfer."""
    directory = Path(tempfile.mkdtemp(prefix="bx-bench-"))
    upstream = directory / "up.sock"
    thread = _streaming_upstream(upstream)
    direct = _drain(upstream)
    with proxied(upstream) as proxy:
        through = _drain(proxy)
    thread.join()
    upstream.unlink()
    directory.rmdir()
    return direct, through


def ms(value: float) -> str:
    return f"{value * 1000:.1f}"


def render(results: dict[str, list[float]], pairs: int, direct_bps: float, proxy_bps: float) -> str:
    added_first = [p - d for p, d in zip(results["p_first"], results["d_first"], strict=True)]
    added_total = [p - d for p, d in zip(results["p_total"], results["d_total"], strict=True)]
    rows = []
    for label, key in (("first event", "first"), ("whole completion", "total")):
        for side, name in (("direct", "d"), ("through inferproxy", "p")):
            values = results[f"{name}_{key}"]
            rows.append(
                f"| {label}, {side} | {ms(quantile(values, 0.5))} | {ms(quantile(values, 0.95))} |"
            )
    for label, values in (
        ("added by the proxy, first event", added_first),
        ("added by the proxy, whole completion", added_total),
    ):
        rows.append(f"| {label} | {ms(quantile(values, 0.5))} | {ms(quantile(values, 0.95))} |")
    mib = 1024 * 1024
    day = datetime.now(UTC).date().isoformat()
    return f"""<!-- bench:inference -->
## Inference path (`bench/inference_bench.py`)

Measured {day} on {platform.machine()}, {os.cpu_count()} cores shared with other work, Python
{platform.python_version()}. SmolLM2-135M in a single-model llama-server on a Unix socket; the
inference client (httpx, streaming, `max_tokens` 8, cached prompts) straight to it and through
inferproxy, {pairs} pairs, alternating which side goes first.

| Latency per request (ms) | p50 | p95 |
|---|---|---|
{chr(10).join(rows)}

Raw throughput of one 256 MiB transfer from a local Unix-socket upstream: direct
{direct_bps / mib:.0f} MiB/s, through inferproxy {proxy_bps / mib:.0f} MiB/s. The added
latency is a per-pair difference, so load from other work on the machine shows up as spread
(the p95) rather than as a bias to one side. Whole completions are dominated by token generation
on the shared cores, so their difference is noise; the first event shows the proxy's own cost.
<!-- /bench:inference -->"""


def write_section(text: str) -> None:
    body = text.removeprefix("<!-- bench:inference -->").removesuffix("<!-- /bench:inference -->")
    report.write_section("inference", body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    args = parser.parse_args()
    with start_single(SMOL) as server, proxied(server.socket) as proxy:
        results = asyncio.run(latency(server.socket, proxy, args.pairs))
    direct_bps, proxy_bps = throughput()
    text = render(results, args.pairs, direct_bps, proxy_bps)
    write_section(text)
    print(text)


if __name__ == "__main__":
    main()
