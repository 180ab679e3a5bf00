"""A recording HTTP proxy in front of llama-server, for the peers benchmark.

    with Recorder(upstream=Path("llama-upstream.sock")) as recorder:
        port = recorder.serve_tcp()            # for the peers: http://127.0.0.1:PORT/v1
        recorder.serve_unix(Path("llama.sock"))  # for Boxmaker's inferproxy
        recorder.label = "hermes/1/3"          # what the next requests belong to
        ...
        recorder.exchanges                     # every request, its answer's timings

Each request is read whole, sent on to the server's Unix socket, and its answer passed back as
it arrives (chunked), so a streamed answer streams through. The request body, the answer's
status and llama-server's ``timings`` (from the body or the last event of the stream) are kept
with the label that was current when the request arrived. The benchmark drives one harness at
a time, so one current label is enough. A harness that gives up on an answer (its own timeout)
leaves the server's work done all the same: the answer is then read to its end, unsent, so its
timings count, and the exchange says the harness left.
"""

from __future__ import annotations

import json
import socketserver
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
from request_diff import timings_of

TAIL = 300  # characters of an answer without timings kept, to say what came instead
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate", "host", "content-length",
              "accept-encoding"}


@dataclass(frozen=True)
class Exchange:
    label: str
    method: str
    path: str
    body: Any  # the request JSON (None for a body that is not JSON)
    status: int
    timings: dict[str, Any] | None
    seconds: float
    client_left: bool = False  # the harness closed its connection before the answer ended
    tail: str = ""  # the answer's last characters, kept when it has no timings


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any  # _Threading*Server with a .recorder

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        self._forward(self._body())

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers: none expected, each skipped
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _forward(self, body: bytes) -> None:
        recorder: Recorder = self.server.recorder
        label, start = recorder.label, time.perf_counter()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        answer = bytearray()
        with recorder.client() as client, client.stream(
            self.command, self.path, content=body or None, headers=headers
        ) as response:
            self.send_response(response.status_code)
            for key, value in response.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            left = False
            for chunk in response.iter_raw():
                answer += chunk
                left = left or not self._send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            left = left or not self._send(b"0\r\n\r\n")
            kind = response.headers.get("content-type", "")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        timings = timings_of(kind, bytes(answer))
        recorder.add(Exchange(
            label=label, method=self.command, path=self.path, body=parsed,
            status=response.status_code, timings=timings, seconds=time.perf_counter() - start,
            client_left=left,
            tail="" if timings else bytes(answer[-TAIL:]).decode("utf-8", "replace"),
        ))

    def _send(self, data: bytes) -> bool:
        """Pass ``data`` on to the harness; False once it has gone. The answer is then still
        read to its end: the server processed the prompt all the same, and its timings come
        last."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True


class _Quiet:
    """A client dropping its idle keep-alive connection (Node's pool does) is not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionResetError):
            super().handle_error(request, client_address)  # type: ignore[misc]


class _TcpServer(_Quiet, socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixServer(_Quiet, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Recorder:
    def __init__(self, upstream: Path):
        self.upstream = upstream
        self.label = ""
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._servers: list[socketserver.BaseServer] = []

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.upstream)),
                            base_url="http://llama", timeout=None)

    def add(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def _start(self, server: socketserver.BaseServer) -> None:
        server.recorder = self  # type: ignore[attr-defined]
        self._servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve_tcp(self) -> int:
        """Listen on a free loopback port; returns it."""
        server = _TcpServer(("127.0.0.1", 0), _Handler)
        self._start(server)
        return int(server.server_address[1])

    def serve_unix(self, path: Path) -> None:
        self._start(_UnixServer(str(path), _Handler))

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
