"""What the laundering and audit attacks share, on top of the fault suite's scripted-model rig
(``faults.rig``: the real inferproxy, memoryd, brokerd with bubblewrap, and loopd, driven by a
model that obeys every directive it reads)."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

from brokerd.audit.log import entries, verify
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from faults.rig import directive, grant, scripted_rig, tool_results, via_call_tool
from faults.test_hostile_model import tree_hash

__all__ = [
    "Page",
    "audited",
    "chain_ok",
    "directive",
    "grant",
    "scripted_rig",
    "tool_results",
    "tree_hash",
    "via_call_tool",
    "writable_by_tools",
]


class Page:
    """A web page on loopback that remembers every path it was asked for."""

    def __init__(self, text: str):
        asked: list[str] = []
        self.asked = asked
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def url(self, path: str = "/p") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def grant(self, classes: tuple[str, ...] = ("public",)) -> str:
        """The docs-fetch pattern: auto, public-only, for this page's host."""
        return grant(["http.fetch"], "auto", "public", argument=("url", "hosts", "127.0.0.1"),
                     sandbox=f'hosts = ["127.0.0.1:{self.port}"]', classes=classes)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def audited(home: Path, tool: str) -> list[tuple[str, str]]:
    """(verdict, reason) of every decision on ``tool``, in log order."""
    return [(e.decision.verdict, e.decision.reason) for e in entries(home / "audit")
            if e.kind == "decision" and e.decision.tool == tool]


def chain_ok(home: Path) -> bool:
    bad, _head = verify(home / "audit")
    return not bad


def writable_by_tools(path: Path) -> Path:
    """Make ``path`` (a directory a grant mounts writable) the tools' own: with brokerd as root
    they run as ``[broker] sandbox_uid``, which must be able to write it."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, DEFAULT_SANDBOX_UID, DEFAULT_SANDBOX_UID)
    return path
