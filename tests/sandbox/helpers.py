"""Helpers the sandbox tests share: specs, mounts, and Decisions minted as policy would."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from brokerd.grantstore import resolve_paths
from brokerd.policy._decision import Decision, mint
from brokerd.policy._opened import OPENED_ARGUMENT, place
from brokerd.sandbox import Mount, Sandbox, SandboxLimits, SandboxOutcome, SandboxSpec
from bxcore.tools import DecisionRecord

GRANTED_HOST = "docs.example.test"
REFUSED_HOST = "elsewhere.example.test"


def decide(spec: SandboxSpec) -> Decision:
    """An allowing Decision for ``spec``, as brokerd's policy would mint it."""
    record = DecisionRecord(session="s-test", call=1, tool=spec.program,
                            arguments_sha256="sha256:" + "0" * 64, verdict="allow",
                            grant="test.toml", reason="test grant")
    return mint(record, spec)


def spec(program: str, arguments: str, **fields) -> SandboxSpec:
    """A spec as policy would make it; for a file tool, its path resolved here and placed in
    ``mounts`` as brokerd does (``OpenedPath``), with no globs."""
    fields.setdefault("limits", SandboxLimits(timeout_s=30.0))
    if (name := OPENED_ARGUMENT.get(program)) is not None and "opened" not in fields:
        roots = tuple((str(m.source), str(m.source)) for m in fields.get("mounts", ()))
        resolved = resolve_paths(json.loads(arguments), {name: roots})[0].get(name)
        fields["opened"] = None if resolved is None else place(resolved,
                                                               fields.get("mounts", ()))
    return SandboxSpec(program=program, arguments=arguments, **fields)


def ro(path: Path) -> Mount:
    return Mount(source=path, target=str(path))


def rw(path: Path) -> Mount:
    return Mount(source=path, target=str(path), writable=True)


def run(backend: Sandbox, call_spec: SandboxSpec) -> SandboxOutcome:
    """One call through ``backend``, as brokerd's runner makes it."""
    return asyncio.run(backend.run(decide(call_spec)))


def shell(argv: list[str], cwd: str) -> str:
    return json.dumps({"argv": argv, "cwd": cwd})


def command(work: Path, argv: list[str], **fields) -> SandboxSpec:
    """A shell.run spec working in ``work``, mounted read-only (and nothing else, unless
    ``fields`` adds mounts)."""
    fields["mounts"] = (ro(work), *fields.get("mounts", ()))
    return spec("shell.run", shell(argv, str(work)), **fields)


def python(code: str) -> list[str]:
    """argv running ``code`` with the sandbox's python3."""
    return ["python3", "-c", code]


# Sandbox code: read the socket ``s`` to its end into ``data`` (saying so if it broke).
RECEIVE_ALL = """\
data = b''
try:
    while chunk := s.recv(4096):
        data += chunk
except OSError as exc:
    print('CLOSED', exc)
"""

_TUNNEL = """\
import os, socket, ssl
proxy = os.environ['HTTPS_PROXY'].rsplit(':', 1)[1]
s = socket.create_connection(('127.0.0.1', int(proxy)), timeout=10)
s.sendall(b'CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n')
print(s.recv(4096).decode().splitlines()[0])
sni = {sni!r}
if sni is None:
    s.sendall(b'GET /tunnelled HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n')
else:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    outgoing = ssl.MemoryBIO()
    client = tls.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=sni)
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass
    s.sendall(outgoing.read())
{receive_all}print('UPSTREAM', 'answered: ' + data.decode('latin-1')[-200:] if data else 'nothing')
"""


def tunnel_script(host: str, port: int, *, sni: str | None) -> str:
    """Python for a sandbox: CONNECT to ``host:port`` through the egress proxy, then open TLS
    naming ``sni`` (a real ClientHello; None: plain HTTP inside the tunnel instead), and print
    the proxy's answer line and ``UPSTREAM answered: <the end of what came back>`` (or
    ``UPSTREAM nothing``)."""
    return _TUNNEL.format(host=host, port=port, sni=sni, receive_all=RECEIVE_ALL)
