"""The egress proxy's pure part: the host allowlist and the parsing of one request head.

A sandbox reaches the network only through this proxy, one request head per connection:

- ``CONNECT host:port HTTP/1.1`` opens a tunnel (https); the proxy never sees inside it.
- ``GET http://host[:port]/path HTTP/1.1`` (absolute form) is plain HTTP: the head is rewritten
  to origin form, ``Host`` is set from the URL (so routing and ``Host`` cannot disagree),
  hop-by-hop and ``Proxy-*`` headers are dropped and ``Connection: close`` is added. A body
  is passed by its ``Content-Length``; a chunked request body is refused, so the proxy always
  knows where the next request head starts (``RequestStream`` checks every one).

Allowlist entries are grant host patterns: ``docs.python.org`` (that host) or ``*.example.org``
(its subdomains, not itself), or IP literals (``10.0.0.5``, ``[fd7a::5]``), each for ports 80
and 443 unless written ``host:port``. Which addresses a name may reach is ``_egress_addr``'s.
Refusals carry a ``Proxy-Status`` header (RFC 9209) that the toolkit turns into a clear error.

A proxied connection is bound to the name it was granted for, not only to its address.

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

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ._egress_addr import canonical_host, ip_literal, split_host_port

HEAD_CAP = 16 * 1024
DEFAULT_PORTS = frozenset({80, 443})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")  # what a request may name
_DROPPED = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                      "proxy-authenticate", "te", "trailer", "upgrade", "host"})


class BadProxyRequest(Exception):
    """The sandbox sent something that is not one proxy request head (the peer did it wrong)."""


@dataclass(frozen=True)
class Allow:
    host: str  # lowercased; for a wildcard the parent domain, e.g. "example.org"
    wildcard: bool
    ports: frozenset[int]

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def parse_allowlist(entries: tuple[str, ...]) -> tuple[Allow, ...]:
    rules = []
    for entry in entries:
        try:
            host, port = split_host_port(entry.lower())
        except ValueError as exc:
            raise ValueError(f"egress host {exc}") from None
        literal = ip_literal(host)
        if literal is None and not _HOST.fullmatch(host):
            raise ValueError(f"egress host {entry!r}: not a host name or *.domain pattern")
        wildcard = host.startswith("*.")
        host = literal.compressed if literal is not None else host.removeprefix("*.")
        rules.append(Allow(host, wildcard, DEFAULT_PORTS if port is None else frozenset({port})))
    return tuple(rules)


def is_allowed(rules: tuple[Allow, ...], host: str, port: int) -> bool:
    host = canonical_host(host)
    return any(rule.matches(host, port) for rule in rules)


@dataclass(frozen=True)
class ProxyRequest:
    host: str
    port: int
    tunnel: bool  # CONNECT: reply 200 and splice; otherwise forward ``head`` then splice
    head: bytes  # the rewritten head for plain HTTP; empty for CONNECT
    rest: bytes  # bytes the client sent after the head (a body's start, maybe more requests)
    body_length: int = 0  # plain HTTP: the body's bytes (Content-Length) after the head


def parse_head(buffer: bytes) -> ProxyRequest | None:
    """One request from the start of a connection, or None while the head is incomplete."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > HEAD_CAP:
            raise BadProxyRequest(f"request head over {HEAD_CAP} bytes")
        return None
    if end > HEAD_CAP:
        raise BadProxyRequest(f"request head over {HEAD_CAP} bytes")
    try:
        text = buffer[:end].decode("ascii")
    except UnicodeDecodeError:
        raise BadProxyRequest("request head is not ASCII") from None
    if any(c in text.replace("\r\n", "") for c in "\r\n\0"):
        raise BadProxyRequest("bare CR, LF or NUL in the request head")
    line, *header_lines = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.1",
                                                                               "HTTP/1.0"):
        raise BadProxyRequest(f"not an HTTP/1.x request line: {line[:80]!r}")
    method, target, version = parts
    headers = [_header(raw) for raw in header_lines]
    rest = buffer[end + 4 :]
    if method == "CONNECT":
        host, port = _authority(target, default_port=None)
        return ProxyRequest(host, port, tunnel=True, head=b"", rest=rest)
    return _plain(method, target, version, headers, rest)


def _header(raw: str) -> tuple[str, str]:
    name, sep, value = raw.partition(":")
    if not sep or not _TOKEN.fullmatch(name):  # also refuses obs-fold continuation lines
        raise BadProxyRequest(f"malformed header line: {raw[:80]!r}")
    return name, value.strip()


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    host, port_text = text, ""
    if text.startswith("["):
        host, _, after = text[1:].partition("]")
        port_text = after.removeprefix(":")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not port_text:
        if default_port is None:
            raise BadProxyRequest(f"CONNECT needs host:port, got {text[:80]!r}")
        return _host(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadProxyRequest(f"bad port in {text[:80]!r}")
    return _host(host), int(port_text)


def _host(host: str) -> str:
    """A request's host: a name a grant could hold, or an IP address. Anything else could
    never be granted, and is refused before it is logged or recorded (attack 31o: 16 KiB
    hosts with terminal escapes, one log line each)."""
    host = host.lower().rstrip(".")
    if not _NAME.fullmatch(host) and ip_literal(host) is None:
        raise BadProxyRequest(f"bad host {host[:80]!r}: not a host name or an IP address")
    return host


def _plain(
    method: str, target: str, version: str, headers: list[tuple[str, str]], rest: bytes
) -> ProxyRequest:
    if not target.lower().startswith("http://"):
        raise BadProxyRequest("plain requests must use an absolute http:// URL (https: CONNECT)")
    try:
        url = urlsplit(target)
    except ValueError as exc:  # an unbalanced "[" or "]" (attack 31o)
        raise BadProxyRequest(f"bad URL {target[:80]!r}: {exc}") from None
    if url.username is not None or url.password is not None:
        raise BadProxyRequest("user information in the URL is refused")
    host, port = _authority(url.netloc, default_port=80)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    authority = host if port == 80 else f"{host}:{port}"
    kept = [(n, v) for n, v in headers if n.lower() not in _DROPPED]
    body_length = _body_length(headers)
    lines = [f"{method} {path} {version}", f"Host: {authority}",
             *(f"{n}: {v}" for n, v in kept), "Connection: close", "", ""]
    return ProxyRequest(host, port, tunnel=False, head="\r\n".join(lines).encode("ascii"),
                        rest=rest, body_length=body_length)


def _body_length(headers: list[tuple[str, str]]) -> int:
    if any(name.lower() == "transfer-encoding" for name, _ in headers):
        raise BadProxyRequest("a chunked (Transfer-Encoding) request body is refused; "
                              "send Content-Length")
    lengths = {value for name, value in headers if name.lower() == "content-length"}
    if not lengths:
        return 0
    if len(lengths) > 1 or not next(iter(lengths)).isdigit():
        raise BadProxyRequest(f"bad Content-Length {sorted(lengths)!r}"[:120])
    return int(next(iter(lengths)))


def refusal(status: int, reason: str, error: str, details: str) -> bytes:
    """A complete response for a request the proxy will not carry."""
    body = f"boxmaker egress: {details}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\n"
        f'Proxy-Status: boxmaker-egress; error={error}; details="{details}"\r\n'
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


TUNNEL_OPEN = b"HTTP/1.1 200 Connection Established\r\n\r\n"


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
