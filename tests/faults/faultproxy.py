"""A fault-injecting proxy between inferproxy and the real llama-server (both Unix sockets).

Requests other than chat completions pass through. Each chat completion takes the next fault
from ``faults`` (``PASS`` when the queue is empty):

- ``PASS``: forwarded untouched;
- ``CUT``: the server's answer is forwarded up to ``cut_after`` bytes, then the connection drops;
- ``STALL_BEFORE``: nothing comes back at all (a queued request that never starts);
- ``STALL_AFTER``: the head and the first piece of the stream come back, then silence;
- ``status(503)``, ``status(500)``: an llama-server-shaped JSON error;
- ``GARBAGE_SSE``: a 200 event stream whose data is not JSON;
- ``GARBAGE``: bytes that are not HTTP at all.

Each request is forwarded with ``Connection: close``, so one connection carries one request and
the proxy needs no HTTP framing of its own.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from .httpserve import BackgroundServer

PASS, CUT, STALL_BEFORE, STALL_AFTER = "pass", "cut", "stall_before", "stall_after"
GARBAGE, GARBAGE_SSE = "garbage", "garbage_sse"
CHAT = b"POST /v1/chat/completions "


def status(code: int) -> str:
    return f"status_{code}"


@dataclass
class Tally:
    chats: int = 0
    injected: dict[str, int] = field(default_factory=dict)


class FaultProxy(BackgroundServer):
    def __init__(self, path: Path, upstream: Path, *, cut_after: int = 700):
        super().__init__(path)
        self.upstream = upstream
        self.cut_after = cut_after
        self.faults: list[str] = []
        self.tally = Tally()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = _content_length(head)
        body = await reader.readexactly(length)
        fault = PASS
        if head.startswith(CHAT):
            self.tally.chats += 1
            fault = self.faults.pop(0) if self.faults else PASS
            self.tally.injected[fault] = self.tally.injected.get(fault, 0) + 1
        if fault == STALL_BEFORE:
            await reader.read()  # until the client gives up and closes
            return
        if fault.startswith("status_"):
            writer.write(_error_response(int(fault.removeprefix("status_"))))
            return
        if fault == GARBAGE:
            writer.write(b"\x00\xffnot http at all\r\n\r\n\x13\x37" * 50)
            return
        if fault == GARBAGE_SSE:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"connection: close\r\n\r\ndata: {\"choices\": [{\"delta\": \xff\n\n"
                         b"data: [not json]\n\n")
            return
        await self._forward(_close_after(head) + body, writer, fault)

    async def _forward(self, request: bytes, writer: asyncio.StreamWriter, fault: str) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.upstream))
        try:
            up_writer.write(request)
            await up_writer.drain()
            sent = 0
            while piece := await up_reader.read(65536):
                if fault == CUT and sent + len(piece) > self.cut_after:
                    writer.write(piece[: self.cut_after - sent])
                    await writer.drain()
                    return
                writer.write(piece)
                await writer.drain()
                sent += len(piece)
                if fault == STALL_AFTER and sent > 0 and b"data:" in piece:
                    await asyncio.Event().wait()  # silent until the client gives up
        finally:
            up_writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def _close_after(head: bytes) -> bytes:
    lines = [line for line in head.rstrip(b"\r\n").split(b"\r\n")
             if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close", b"", b""])


def _error_response(code: int) -> bytes:
    kind = "unavailable_error" if code == 503 else "server_error"
    body = json.dumps({"error": {"code": code, "message": "Loading model", "type": kind}}).encode()
    return (f"HTTP/1.1 {code} Error\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body
