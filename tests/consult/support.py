"""What the consult tests share: a fake OpenAI-compatible "cloud" on loopback, a TCP front for
a llama-server on a Unix socket, and a Broker wired as ``brokerd serve`` wires it, with the
real bubblewrap sandbox, the real egress proxy and a real grant file.

The fake's normal answer is a llama-server stream recorded byte for byte
(tests/fixtures/sse/), so the fake speaks what the real thing speaks; its faults (HTTP 500, a
slow stream, a stall after the first byte, a malformed event) are the ones a hosted endpoint
shows. It keeps every byte it received, for the canary test.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import secrets
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from brokerd.approvals import ApprovalBook, ApprovalDesk
from brokerd.audit import AuditLog
from brokerd.calls import Broker
from brokerd.egresslog import CONSULT, ConsultEgress
from brokerd.grantstore import GrantStore
from brokerd.labelstore import LabelStore
from brokerd.memory import MemoryClient
from brokerd.runner import Runner
from brokerd.sandbox import BubblewrapSandbox
from brokerd.taint import TaintStore
from bxcore.config import ConsultSection, SecretSpec
from bxcore.protocol.broker import ToolWaiting
from bxcore.secrets import SecretStore
from bxcore.tools import ToolRequest, ToolResponse
from support.requires import require

REPO = Path(__file__).resolve().parents[2]
TOOLKIT_DIR = REPO / "packages" / "toolkit" / "src" / "toolkit"
RECORDED = REPO / "tests" / "fixtures" / "sse" / "qwen_turn1.sse"
CLOUD = "cloud.consult.test"  # the proxy resolves this name itself (no DNS) to loopback
LIVENESS_S = 2.0
PAUSE_S = 0.6  # between the slow stream's events: under the liveness limit, longer in total
# The slow stream pauses after its first events only: 4.2 s in all, over twice the liveness
# limit, which is what the slow cases need; pausing after every one of the recording's 16
# events took 9.6 s per case and judged nothing more.
SLOW_PAUSES = 7


def recorded_answer(sse: bytes) -> str:
    """The content deltas of a recorded stream, joined: what consult must print for it."""
    text = ""
    for line in sse.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


@dataclass
class FakeCloud:
    """One scripted behaviour at a time: ok, error500, slow, stall, malformed."""

    port: int = 0
    behaviour: str = "ok"
    received: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def endpoint(self) -> str:
        return f"http://{CLOUD}:{self.port}/v1/chat/completions"

    @property
    def all_bytes(self) -> bytes:
        return b"".join(self.received)


def _handler(cloud: FakeCloud) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            cloud.received.append(self.raw_requestline + bytes(self.headers) + body)
            cloud.headers.append(dict(self.headers))
            cloud.bodies.append(json.loads(body))
            if cloud.behaviour == "error500":
                self._plain(500, b'{"error":{"message":"upstream overloaded","code":500}}')
                return
            events = [e + b"\n\n" for e in RECORDED.read_bytes().split(b"\n\n") if e.strip()]
            if cloud.behaviour == "malformed":
                events = [events[0], b"data: {\"choices\": [\n\n", *events[1:]]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            if cloud.behaviour in ("slow", "stall"):
                # As llama-server does: the client's socket then belongs to the response.
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            for index, event in enumerate(events):
                self._chunk(event)
                if cloud.behaviour == "stall" and index == 0:
                    cloud.release.wait()  # silent until the test ends
                    return
                if cloud.behaviour == "slow" and index < SLOW_PAUSES:
                    time.sleep(PAUSE_S)
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            with contextlib.suppress(OSError):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        def _plain(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextlib.contextmanager
def fake_cloud() -> Iterator[FakeCloud]:
    cloud = FakeCloud()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(cloud))
    server.daemon_threads = True
    cloud.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield cloud
    finally:
        cloud.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.asynccontextmanager
async def tcp_front(unix_socket: Path) -> AsyncIterator[int]:
    """An ephemeral loopback TCP port forwarding each connection to ``unix_socket``: the
    egress proxy connects over TCP, and the test's llama-server listens on a Unix socket."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(unix_socket))
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def consult_section(endpoint: str, **overrides: object) -> ConsultSection:
    values: dict[str, object] = {
        "endpoint": endpoint, "model": "cloud-model", "temperature": 0.6,
        "api_key": "consult_key", "first_byte_timeout": 60.0, "liveness_timeout": LIVENESS_S,
    }
    values.update(overrides)
    return ConsultSection.model_validate(values)


def grant_text(host: str, *, mode: str = "auto", classes: tuple[str, ...] = ("public",),
               allow_untrusted: bool = True, secrets_: tuple[str, ...] = ("consult_key",)) -> str:
    return textwrap.dedent(f"""\
        tools = ["consult"]
        mode = "{mode}"
        classes = {json.dumps(list(classes))}
        result_class = "public"
        allow_untrusted = {str(allow_untrusted).lower()}

        [sandbox]
        hosts = ["{host}"]
        secrets = {json.dumps(list(secrets_))}

        [sandbox.limits]
        timeout_s = 600
        output_cap = 65536
        """)


@dataclass
class ConsultRig:
    home: Path
    grants: Path
    broker: Broker
    egress: ConsultEgress
    key: str
    sandbox: BubblewrapSandbox

    def grant(self, text: str, name: str = "consult.toml") -> None:
        (self.grants / name).write_text(text, encoding="utf-8")

    def call(self, question: str, attachments: list[str] | None = None, *, call: int = 1,
             session: str = "s-consult") -> ToolResponse:
        arguments: dict[str, object] = {"question": question}
        if attachments is not None:
            arguments["attachments"] = attachments
        return self.call_tool(CONSULT, arguments, call=call, session=session)

    def call_tool(self, tool: str, arguments: dict[str, object], *, call: int = 1,
                  session: str = "s-consult") -> ToolResponse:
        request = ToolRequest(session=session, call=call, tool=tool,
                              arguments=json.dumps(arguments))
        return asyncio.run(self.broker.call(request, no_approval_wait))


async def no_approval_wait(waiting: ToolWaiting) -> None:
    """Broker.call's listener for an auto grant: a slow call is told about while it runs, but
    it never waits for an approval."""
    assert waiting.reason == "running", waiting


def make_rig(tmp_path: Path, section: ConsultSection, host: str = CLOUD) -> ConsultRig:
    """A Broker for ``section``'s endpoint; the egress proxy resolves ``host`` to loopback."""
    require("bwrap")
    home, grants, scratch = tmp_path / "home", tmp_path / "grants", tmp_path / "scratch"
    for directory in (grants, scratch):
        directory.mkdir(parents=True)
    key = "sk-test-" + secrets.token_hex(8)
    key_file = tmp_path / "consult.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    store = SecretStore({"consult_key": SecretSpec(backend="file", path=key_file)})
    audit = AuditLog(home / "audit")
    taints = TaintStore(home / "broker" / "sessions")
    desk = ApprovalDesk(ApprovalBook(frozenset({"owner"}), timedelta(seconds=30)),
                        clock=lambda: datetime.now(UTC), gateway_socket=None,
                        waiting_interval=0.05)
    sandbox = BubblewrapSandbox(toolkit_dir=TOOLKIT_DIR, scratch_root=scratch,
                                egress_resolver={host: "127.0.0.1"})
    egress = ConsultEgress(section, home / "egress")
    runner = Runner(backend=sandbox, memory=MemoryClient(tmp_path / "no-memory.sock"),
                    audit=audit, taints=taints, labels=LabelStore(home / "broker" / "labels.jsonl"),
                    result_cap=65536, consult=egress)
    broker = Broker(grants=GrantStore(grants), audit=audit, taints=taints, desk=desk,
                    runner=runner, secrets=store, clock=lambda: datetime.now(UTC),
                    configured={CONSULT: egress.settings})
    return ConsultRig(home, grants, broker, egress, key, sandbox)


ECHO_GRANT = 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\nresult_class = "public"\n'
