"""Binding a proxied connection to the name it was granted for, not only to its address (pure).

A grant names a service (``docs.example.org``), but a CDN serves many tenants on one address;
a tool that controls its client could ask the proxy for the granted name and then speak to
another tenant on the same connection. So, after the first request head:

- plain HTTP (``RequestStream``): the client's bytes are followed request by request. A body
  passes by its length; every further head is parsed like the first and must name the same
  host and port, or nothing more is forwarded: the requests before it are answered, and the
  client's side of the upstream connection is closed. Each head is rewritten as the
  first was (``Host`` from the URL), so no raw head ever reaches the upstream.
- CONNECT (``client_hello_sni``): the tunnel's first bytes must be a TLS ClientHello whose
  server name (SNI) is the host the CONNECT named. No SNI is accepted only when that host is
  an IP literal (TLS sends none for addresses); anything that is not a ClientHello is refused.

What this cannot see: a request inside the TLS session (an HTTP ``Host`` or HTTP/2
``:authority`` naming another name the same certificate covers, i.e. domain fronting), and an
encrypted ClientHello (ECH), whose outer SNI is all a proxy gets. docs/threat-model.md says so.
"""

from __future__ import annotations

from ._egress_addr import canonical_host, ip_literal
from ._egress_http import BadProxyRequest, parse_head

TLS_HANDSHAKE = 0x16
CLIENT_HELLO = 0x01
SERVER_NAME = 0x0000
RECORD_CAP = 5 + 16 * 1024 + 2048  # a record header, the largest plaintext record, slack


class HostChanged(BadProxyRequest):
    """A later request on the connection named another destination than the granted one."""


class RequestStream:
    """The client's bytes of a plain-HTTP connection after its first head (and that head's
    ``rest``): ``feed`` returns what may go upstream. At the first head that is malformed or
    names another destination it stops: ``refused`` says why, and nothing after it is ever
    returned (what came before it still is, so earlier requests are answered)."""

    def __init__(self, host: str, port: int, body_left: int):
        self._host = canonical_host(host)
        self._port = port
        self._body_left = body_left
        self._buffer = b""
        self.refused: str | None = None

    def feed(self, data: bytes) -> bytes:
        if self.refused is not None:
            return b""
        self._buffer += data
        out = bytearray()
        while self._buffer:
            if self._body_left:
                taken = self._buffer[: self._body_left]
                out += taken
                self._body_left -= len(taken)
                self._buffer = self._buffer[len(taken) :]
                continue
            try:
                request = parse_head(self._buffer)
            except BadProxyRequest as exc:
                return self._refuse(out, str(exc))
            if request is None:
                break
            if request.tunnel or (canonical_host(request.host), request.port) != (
                    self._host, self._port):
                return self._refuse(out, f"a later request on this connection names "
                                         f"{request.host}:{request.port}, not "
                                         f"{self._host}:{self._port}")
            out += request.head
            self._body_left = request.body_length
            self._buffer = request.rest
        return bytes(out)

    def _refuse(self, out: bytearray, why: str) -> bytes:
        self.refused = why
        self._buffer = b""
        return bytes(out)


def client_hello_sni(buffer: bytes) -> str | bool | None:
    """The SNI of the TLS ClientHello at the start of ``buffer``: the name, None when the hello
    has no server name, False while the record is incomplete. BadProxyRequest when ``buffer``
    does not start with a ClientHello."""
    if len(buffer) < 5:
        return False
    if buffer[0] != TLS_HANDSHAKE or buffer[1] != 3:
        raise BadProxyRequest("the tunnel did not start with a TLS handshake")
    length = int.from_bytes(buffer[3:5], "big")
    if length > RECORD_CAP:
        raise BadProxyRequest("the TLS record is larger than TLS allows")
    if len(buffer) < 5 + length:
        return False
    return _sni(_Reader(buffer[5 : 5 + length]))


def check_sni(granted_host: str, sni: str | None) -> None:
    """Refuse a ClientHello that names another server than the CONNECT did."""
    host = canonical_host(granted_host)
    if sni is None:
        if ip_literal(host) is None:
            raise BadProxyRequest(f"the TLS ClientHello names no server; {host} was granted")
        return
    if canonical_host(sni) != host:
        raise HostChanged(f"the TLS ClientHello names {sni[:255]!r}, not {host}")


class _Reader:
    def __init__(self, data: bytes):
        self._data = data
        self._at = 0

    def take(self, count: int) -> bytes:
        if self._at + count > len(self._data):
            raise BadProxyRequest("the TLS ClientHello is cut short (or spans records)")
        chunk = self._data[self._at : self._at + count]
        self._at += count
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, size: int) -> _Reader:
        return _Reader(self.take(self.number(size)))

    def rest(self) -> bytes:
        return self.take(len(self._data) - self._at)

    def done(self) -> bool:
        return self._at >= len(self._data)


def _sni(record: _Reader) -> str | None:
    if record.number(1) != CLIENT_HELLO:
        raise BadProxyRequest("the tunnel's first TLS message is not a ClientHello")
    hello = _Reader(record.take(record.number(3)))
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # session id
    hello.vector(2)  # cipher suites
    hello.vector(1)  # compression methods
    if hello.done():
        return None  # no extensions at all
    extensions = hello.vector(2)
    while not extensions.done():
        kind = extensions.number(2)
        body = extensions.vector(2)
        if kind != SERVER_NAME:
            continue
        names = body.vector(2)
        while not names.done():
            name_type = names.number(1)
            name = names.vector(2)
            if name_type == 0:
                try:
                    return name.rest().decode("ascii")
                except UnicodeDecodeError:
                    raise BadProxyRequest("the TLS server name is not ASCII") from None
        return None
    return None
