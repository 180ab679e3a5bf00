"""The peers benchmark's recording proxy (bench/recording_proxy.py): an answer streams through
unchanged, and every request is kept with its label and the server's timings."""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from recording_proxy import Recorder

TIMINGS = {"cache_n": 7, "prompt_n": 30, "predicted_n": 2}
STREAM = (b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n'
          + f"data: {json.dumps({'choices': [], 'timings': TIMINGS})}\n\n".encode()
          + b"data: [DONE]\n\n")


class _Upstream(BaseHTTPRequestHandler):
    """A stand-in for llama-server (the proxy is what is tested): a stream for a completion."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        return None

    def do_POST(self):
        self.server.seen.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(STREAM)))
        self.end_headers()
        self.wfile.write(STREAM)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_a_streamed_completion_passes_through_and_is_recorded_with_its_timings(tmp_path):
    upstream = _UnixServer(str(tmp_path / "llama.sock"), _Upstream)
    upstream.seen = []
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    body = {"model": "qwen-tools", "stream": True, "messages": [{"role": "user", "content": "a"}]}
    try:
        with Recorder(tmp_path / "llama.sock") as recorder:
            port = recorder.serve_tcp()
            recorder.serve_unix(tmp_path / "proxy.sock")
            recorder.label = "hermes|1|1"
            tcp = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            recorder.label = "boxmaker|1|1"
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(tmp_path / "proxy.sock"))) \
                    as client:
                unix = client.post("http://llama/v1/chat/completions", json=body)
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert tcp.content == STREAM and unix.content == STREAM
    assert [json.loads(seen) for seen in upstream.seen] == [body, body]
    assert [(e.label, e.path, e.body, e.status, e.timings) for e in recorder.exchanges] == [
        ("hermes|1|1", "/v1/chat/completions", body, 200, TIMINGS),
        ("boxmaker|1|1", "/v1/chat/completions", body, 200, TIMINGS),
    ]


class _SlowUpstream(BaseHTTPRequestHandler):
    """Streams its first event, waits until the test's client has gone, then sends the rest
    (several writes: the second write to a closed connection is the one that fails)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        return None

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        first, rest = STREAM[:40], STREAM[40:]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(STREAM)))
        self.end_headers()
        self.wfile.write(first)
        self.wfile.flush()
        assert self.server.client_gone.wait(30)
        for piece in (rest[:10], rest[10:20], rest[20:]):
            time.sleep(0.05)  # each piece its own chunk for the proxy
            self.wfile.write(piece)
            self.wfile.flush()


def test_a_harness_that_leaves_before_the_end_still_has_its_answer_read_and_timed(tmp_path):
    upstream = _UnixServer(str(tmp_path / "llama.sock"), _SlowUpstream)
    upstream.client_gone = threading.Event()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    body = json.dumps({"stream": True, "messages": [{"role": "user", "content": "a"}]}).encode()
    try:
        with Recorder(tmp_path / "llama.sock") as recorder:
            port = recorder.serve_tcp()
            recorder.label = "openclaw|1|1"
            harness = socket.create_connection(("127.0.0.1", port))
            harness.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Type: application/json\r\n"
                            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert harness.recv(1)  # the answer has started
            harness.close()  # ...and the harness gives up on it
            upstream.client_gone.set()
            deadline = time.monotonic() + 30
            while not recorder.exchanges and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        upstream.shutdown()
        upstream.server_close()
    (exchange,) = recorder.exchanges
    assert exchange.client_left and exchange.timings == TIMINGS and exchange.tail == ""
