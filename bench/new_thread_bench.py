"""A new thread on the baseline the server holds: the real llama-server, interleaved threads that
share a baseline, each request's processed tokens against what it truly adds.

The session marker at the start of the system message (loopd before issue 34) or after the
baseline (the start of the first user message), random or chosen by loopd's ``MarkerBook`` (the
whitespace whose first token after the baseline is apart from the kept sessions'); the server's
`--slot-prompt-similarity` at its default 0.10 or at 1. *Truly new*: the request's tokens after
the longest prefix it shares with anything the server processed before (prompts and answers,
by /tokenize), the physical limit; *processed*: the server's `prompt_n`.
(docs/decisions/new-thread-on-the-baseline.md)
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from loopd.inference.markers import MARKERS, MarkerBook
from report import ROOT, load_note, machine_line, today, write_section

MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
# What a day does: the first thread ever, new threads after others, short and long threads
# coming back after each other.
SCRIPT = (
    ("A", "Hello, what can you do?"),
    ("B", "Name a colour."),
    ("A", "Thanks. And a fruit?"),
    ("C", "Please summarise this. " + " ".join(
        f"Item {n} is a line of notes about the day." for n in range(40))),
    ("B", "Another colour?"),
    ("C", "Shorter please."),
    ("D", "What is two plus two?"),
    ("A", "One more fruit."),
    ("E", "Say hi."),
)
# Three threads whose markers share their first token by chance (A1 and A2), the second long:
# the third's first request beats the held (long) thread by one token on an entry (the first,
# short) and the server loads that entry to serve it, which consumes it.
COLLIDING = (
    ("A1", "Hello, what can you do?"),
    ("B1", "Name a colour. " + " ".join(f"Note {n} is about paint." for n in range(6))),
    ("A2", "Name a fruit."),
    ("A1", "Thanks. And a fruit?"),
    ("B1", "Another colour?"),
)
# More threads than the book has keys (MARKERS, one key each on Qwen's tokenizer): T1 (the
# shortest) to T25 hold every key, T26 gets the key of the least recently used, T1; then the two
# come back with another thread's turn between them.
CROWDED = (
    ("T1", "Hi."),
    *((f"T{n}", f"Name a colour, number {n}.") for n in range(2, len(MARKERS) + 1)),
    (f"T{len(MARKERS) + 1}", "Name a fruit."),
    ("T2", "Thanks."), ("T1", "Thanks."), ("T3", "Thanks."), (f"T{len(MARKERS) + 1}", "Thanks."),
    ("T4", "Thanks."), ("T1", "Again."), (f"T{len(MARKERS) + 1}", "Again."),
)
# Marker *chosen*: loopd's (after the baseline); the colliding threads' names no longer matter.
CONFIGS = (("chosen", "1.0", SCRIPT), ("chosen", "1.0", COLLIDING), ("chosen", "1.0", CROWDED),
           ("shared", "1.0", CROWDED), ("user", "1.0", SCRIPT), ("user", "0.10", SCRIPT),
           ("system", "0.10", SCRIPT), ("user", "1.0", COLLIDING))
SEQUENCES = {id(SCRIPT): "day", id(COLLIDING): "colliding", id(CROWDED): "crowded"}


class Server:
    def __init__(self, binary: Path, model: Path, similarity: str, log: Path):
        self.port = 20000 + secrets.randbelow(20000)
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
             "-np", "2", "-c", "8192", "-t", "2", "--no-ui", "--cache-ram", "8192",
             "--slot-prompt-similarity", similarity],
            stdout=self._log, stderr=self._log)
        for _ in range(1200):
            try:
                if self.call("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"llama-server did not start: {log}")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1800)
        connection.request(method, path, json.dumps(body) if body is not None else None,
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")

    def tokens(self, messages: list[dict[str, str]]) -> list[int]:
        _, rendered = self.call("POST", "/apply-template", {"messages": messages})
        _, tokens = self.call("POST", "/tokenize", {"content": rendered["prompt"]})
        return list(tokens["tokens"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()
        self._log.close()


def common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def run(server: Server, place: str, script: tuple[tuple[str, str], ...],
        ) -> list[tuple[str, bool, int, int, int]]:
    """(thread, first request?, truly new, processed, cached) per request of ``script``; the
    threads' markers are random, but those of COLLIDING are their names."""
    baseline = f"Baseline {secrets.token_hex(4)}. You are a careful assistant. " + " ".join(
        f"Rule {n}: keep answers short, say what you did, and never invent a file."
        for n in range(12))
    threads: dict[str, list[dict[str, str]]] = {}
    markers: dict[str, tuple[str, str]] = {}  # thread: its marker and where it goes
    openings: dict[str, str] = {}  # thread: its first message, without the marker

    async def tokenize(text: str) -> list[int]:
        return list(server.call("POST", "/tokenize", {"content": text})[1]["tokens"])

    book = MarkerBook(tokenize)
    used: list[str] = []  # threads, least recently used first
    seen: list[list[int]] = []
    rows = []
    for name, text in script:
        first = name not in threads
        if first:
            tag = name if script is COLLIDING else secrets.token_hex(5)
            marker: str | None = f"[session {tag}]\n"
            if place in ("chosen", "shared"):
                marker = asyncio.run(book.new(name, text))
                if marker is None and place == "shared":  # the least recently used's key
                    marker = next(markers[t][0] for t in used if markers[t][1] == "user")
            where = "system" if place == "system" or marker is None else "user"
            markers[name] = (marker or f"[session {tag}]\n", where)
            openings[name] = text
        marker, where = markers[name]
        if not first:
            book.used(name, marker if where == "user" else None, openings[name])
        used = [*(t for t in used if t != name), name]
        turns = threads.setdefault(name, [])
        opening = marker if first and where == "user" else ""
        turns.append({"role": "user", "content": opening + text})
        system = (marker if where == "system" else "") + baseline
        messages = [{"role": "system", "content": system}, *turns]
        prompt = server.tokens(messages)
        new = len(prompt) - max([common(prompt, s) for s in seen] + [0])
        _, answer = server.call("POST", "/v1/chat/completions", {
            "messages": messages, "id_slot": 0, "cache_prompt": True, "max_tokens": 8,
            "temperature": 0})
        turns.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
        seen.append(server.tokens([messages[0], *turns])[: len(prompt) + 8])
        timings = answer["timings"]
        rows.append((name, first, new, int(timings["prompt_n"]), int(timings["cache_n"])))
    return rows


def render(results: dict[tuple[str, str, str], list[tuple[str, bool, int, int, int]]],
           note: str) -> str:
    table = []
    for (place, similarity, sequence), rows in results.items():
        news = [r for r in rows[1:] if r[1]]
        returns = [r for r in rows if not r[1]]
        table.append(
            f"| {sequence} | {place} | {similarity} | {_cell(news)} | {_cell(returns)} | "
            f"{sum(r[3] for r in rows):,} / {sum(r[2] for r in rows):,} |")
    last = f"T{len(MARKERS) + 1}"

    def pair(place: str) -> str:
        return ", ".join(f"{r[0]} {'new' if r[1] else 'back'} {r[3]} of {r[2]}"
                         for r in results.get((place, "1.0", "crowded"), [])
                         if r[0] in ("T1", last))
    return f"""## A new thread on the baseline the server holds (`bench/new_thread_bench.py`)

{today()}, {machine_line()}; {note} at the end. The real llama-server ({MODEL}, 2 slots of
4,096 tokens, `--cache-ram 8192`), threads sharing a ~260-token baseline, every request on
slot 0. Sequence *day*: five threads in the order A (the first ever), B, A, C (long), B, C, D,
A, E, random markers; *colliding*: three threads whose markers share their first token (A1, A2)
in the order A1, B1 (longer), A2, A1, B1; *crowded*: {len(MARKERS) + 1} threads, one more than
loopd has keys ({len(MARKERS)}), T1 (the shortest) to {last} new, then T2, T1, T3, {last}, T4,
T1, {last} back. *processed of truly new* per request: the server's `prompt_n` against the
tokens no earlier prompt or answer shared (by `/tokenize`; a return's floor is its new tokens
plus the one the server evaluates again). *similarity*: `--slot-prompt-similarity`. Marker
*chosen*: loopd's, whitespace at the start of the first user message after the baseline, its
first token apart from every kept thread's (what loopd sends); *user*: the same place, random
(`[session <hex>]`, the colliding ones named); *system*: at the start of the system message
(loopd before issue 34). *shared*: *chosen*, but a new thread that loopd gives no key (the
legacy marker, at the start of the system message) gets the least recently used thread's
instead. A cell of more than eight requests gives their sum and the worst.

| sequence | marker | similarity | new threads after the first | returns | processed / new |
|---|---|---|---|---|---|
{chr(10).join(table)}

With the marker after the baseline and the similarity at 1, a new thread processes only its own
tokens and returns stay at the floor, unless a new thread's marker shares a leading token with a
shorter kept thread's: the server then loads that thread's entry to serve the new one (one more
cached token), which consumes it, and that thread re-reads its own part on return (*user*,
*colliding*); loopd's chosen markers never share that token (*chosen*, *colliding*). With one
thread more than keys, loopd gives the last no key: it reads its own copy of the baseline once
and every return stays at the floor (*chosen*, *crowded*: {pair("chosen")}). Had it the least
recently used thread's key (*shared*: {pair("shared")}), it would take that thread's entry when
that entry is no longer than the held thread's, and then each of the two, coming back with other
turns between them, loads the other's entry and re-reads its own part. At the default 0.10 a
thread that is mostly the baseline is reused in place by the next one and read again on its
return. With the marker first every new thread reads its own copy of the baseline
(docs/decisions/new-thread-on-the-baseline.md).
"""


def _cell(rows: list[tuple[str, bool, int, int, int]]) -> str:
    if len(rows) <= 8:
        return ", ".join(f"{r[3]} of {r[2]}" for r in rows)
    worst = max(rows, key=lambda r: r[3] - r[2])
    return (f"{len(rows)}: {sum(r[3] for r in rows):,} of {sum(r[2] for r in rows):,}, "
            f"worst {worst[3]} of {worst[2]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    binary = Path(subprocess.run([str(ROOT / "scripts" / "llama-server.sh"), "binary"],
                                 check=True, capture_output=True, text=True).stdout.strip())
    models = Path(subprocess.run([str(ROOT / "scripts" / "llama-server.sh"), "models"],
                                 check=True, capture_output=True, text=True).stdout.strip())
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-new-thread-") as logs:
        for place, similarity, script in CONFIGS:
            server = Server(binary, models / MODEL, similarity, Path(logs) / "server.log")
            try:
                key = (place, similarity, SEQUENCES[id(script)])
                results[key] = run(server, place, script)
            finally:
                server.stop()
    text = render(results, load_note())
    print(text if args.no_write else write_section("new_thread", text))


if __name__ == "__main__":
    main()
