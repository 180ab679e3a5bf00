"""A stand-in for the llama-server router in the NixOS VM test: it answers every chat completion
with one fixed streamed reply, in the OpenAI SSE shape llama-server uses, and /health, /props,
/slots with the values the test config expects. It is no model: the test is about the plumbing
(loopd without a network reaching it through inferproxy), not about inference.

    python3 stand-in-model.py HOST PORT
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = "Hello from the stand-in model."
PROPS = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2, "chat_template": ""}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _json(self, value: object) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/slots"):
            self._json([{"id": 0, "n_ctx": 4096}, {"id": 1, "n_ctx": 4096}])
        elif self.path.startswith("/props"):
            self._json(PROPS)
        else:
            self._json({"status": "ok"})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path.startswith("/tokenize"):
            self._json({"tokens": list(range(len(request.get("content", "")) // 4 + 1))})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": REPLY}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
             "timings": {"cache_n": 0, "prompt_n": 10}},
        ]
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
