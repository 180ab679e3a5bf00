"""The per-call egress proxy: an allowlisting HTTP proxy on a Unix socket.

When a grant names hosts, the sandbox backend starts one of these for the call, bind-mounts its
socket directory into the sandbox (where ``toolkit.bridge`` exposes it as 127.0.0.1:<port>),
and closes it, with every connection, when the call ends. The sandbox has no network of its
own, so this allowlist is all it can reach. Parsing and matching are pure
(``brokerd._egress_http``); this module only moves bytes.

``resolver`` maps host names to addresses without DNS (tests use it; so could an owner who
pins addresses): it is configuration, trusted as the owner's. Without it a name is resolved
once, through ``lookup`` (the system resolver; tests pass their own), every address it gives
must be public or inside the grant's ``internal`` networks (``brokerd._egress_addr``; a request
for an IP literal the grant names counts as naming that address), and the proxy connects to
the vetted socket address itself, so no second lookup can answer differently.

The connection stays bound to the granted name (``brokerd._egress_http``): every later
plain-HTTP request head on it must name the same host, and a tunnel must open with a TLS
ClientHello whose SNI is the host CONNECT named. A mismatch closes the connection and is
recorded as a refused event, like a host outside the grant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._egress_addr import address_refusal, ip_literal, networks
from ._egress_http import (
    TUNNEL_OPEN,
    BadProxyRequest,
    ProxyRequest,
    RequestStream,
    check_sni,
    client_hello_sni,
    is_allowed,
    parse_allowlist,
    parse_head,
    refusal,
)

log = logging.getLogger("brokerd.egress")

HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
_CHUNK = 64 * 1024
EVENTS_KEPT = 256  # requests recorded and logged per call; past them only counted

# getaddrinfo's answer: (family, type, proto, canonname, sockaddr)
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]
Lookup = Callable[[str, int], Awaitable[Sequence[AddrInfo]]]


async def system_lookup(host: str, port: int) -> Sequence[AddrInfo]:
    loop = asyncio.get_running_loop()
    return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)


@dataclass(frozen=True)
class EgressEvent:
    """One request the proxy saw: what was asked and whether it was carried."""

    host: str
    port: int
    allowed: bool
    detail: str


class EgressProxy:
    def __init__(self, hosts: tuple[str, ...], resolver: Mapping[str, str] | None = None, *,
                 internal: tuple[str, ...] = (), lookup: Lookup = system_lookup):
        self._rules = parse_allowlist(hosts)
        self._resolver = dict(resolver) if resolver is not None else None
        self._internal = networks(internal)
        self._lookup = lookup
        self._tasks: set[asyncio.Task[None]] = set()
        self.events: list[EgressEvent] = []  # the first EVENTS_KEPT, each logged
        self.unrecorded = 0  # requests past those: counted, logged once when the call ends

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve_one(reader, writer)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            pass  # the sandbox hung up or stalled: nothing to answer
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(_read_head(reader), HEAD_TIMEOUT_S)
        except BadProxyRequest as exc:
            writer.write(refusal(400, "Bad Request", "http_protocol_error", str(exc)))
            await writer.drain()
            return
        if not is_allowed(self._rules, request.host, request.port):
            details = f"{request.host}:{request.port} is not granted to this call"
            await self._refuse(request, writer, "destination_ip_prohibited",
                               "not in the grant's host list", details)
            return
        upstream = await self._connect(request, writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        try:
            if request.tunnel:
                writer.write(TUNNEL_OPEN)
                try:
                    hello = await asyncio.wait_for(_read_hello(reader, request), HEAD_TIMEOUT_S)
                except BadProxyRequest as exc:
                    self._note(request, False, f"refused in the tunnel: {exc}")
                    return
                up_writer.write(hello)
                client = _pump(reader, up_writer)
            else:
                stream = RequestStream(request.host, request.port, request.body_length)
                up_writer.write(request.head + stream.feed(request.rest))
                client = _pump(reader, up_writer, stream, refused=lambda why: self._note(
                    request, False, f"refused on the connection: {why}"))
            await asyncio.gather(client, _pump(up_reader, writer))
        finally:
            up_writer.close()

    async def _connect(
        self, request: ProxyRequest, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        if self._resolver is not None:  # the owner's table: configuration, not DNS
            if request.host not in self._resolver:
                await self._fail(request, writer, "destination_not_found", "unresolved")
                return None
            opening = asyncio.open_connection(self._resolver[request.host], request.port)
        else:
            try:
                found = await asyncio.wait_for(self._lookup(request.host, request.port),
                                               CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError) as exc:
                await self._fail(request, writer, "dns_error", f"cannot resolve: {exc}")
                return None
            if not found:
                await self._fail(request, writer, "destination_not_found", "no address")
                return None
            literal = ip_literal(request.host)
            named = self._internal + (networks([literal.compressed]) if literal else ())
            for info in found:
                why = address_refusal(info[4][0], named)
                if why is not None:
                    details = (f"{request.host}:{request.port} resolves to an address this call "
                               f"may not reach: {why}")
                    await self._refuse(request, writer, "destination_ip_prohibited", why, details)
                    return None
            opening = _open_vetted(found)
        try:
            connection = await asyncio.wait_for(opening, CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            detail = f"cannot connect: {exc}"
            await self._fail(request, writer, "connection_refused", detail)
            return None
        self._note(request, True, "carried")
        return connection

    async def _fail(
        self, request: ProxyRequest, writer: asyncio.StreamWriter, error: str, detail: str
    ) -> None:
        details = f"{request.host}:{request.port} {detail}"
        await self._refuse(request, writer, error, detail, details, status=502)

    async def _refuse(self, request: ProxyRequest, writer: asyncio.StreamWriter, error: str,
                      note: str, details: str, status: int = 403) -> None:
        """Answer with the proxy's refusal (Proxy-Status ``error``, ``details``), and record
        the request as refused with ``note``."""
        self._note(request, False, note)
        reason = "Forbidden" if status == 403 else "Bad Gateway"
        writer.write(refusal(status, reason, error, details))
        await writer.drain()

    def _note(self, request: ProxyRequest, allowed: bool, detail: str) -> None:
        """Record and log one request, up to EVENTS_KEPT a call: a tool that sends requests
        in a loop grows neither brokerd's memory nor its log (attack 31o, F2)."""
        if len(self.events) >= EVENTS_KEPT:
            self.unrecorded += 1
            return
        self.events.append(EgressEvent(request.host, request.port, allowed, detail))
        log.info("egress %s:%d %s (%s)", request.host, request.port,
                 "carried" if allowed else "refused", detail)

    async def close_connections(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _open_vetted(found: Sequence[AddrInfo]) -> tuple[asyncio.StreamReader,
                                                         asyncio.StreamWriter]:
    """Connect to the first address in ``found`` that answers, by its socket address as the
    lookup gave it: nothing is resolved again between the check and the connection."""
    loop = asyncio.get_running_loop()
    error: OSError = OSError("the name has no address")
    for family, kind, proto, _, sockaddr in found:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)
    raise error


async def _read_head(reader: asyncio.StreamReader) -> ProxyRequest:
    buffer = b""
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            raise BadProxyRequest("connection closed before a complete request head")
        buffer += chunk
        request = parse_head(buffer)
        if request is not None:
            return request


async def _read_hello(reader: asyncio.StreamReader, request: ProxyRequest) -> bytes:
    """The tunnel's first TLS record, once its SNI is checked against the CONNECT's host."""
    buffer = request.rest
    while (sni := client_hello_sni(buffer)) is False:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            raise BadProxyRequest("the tunnel closed before a TLS ClientHello")
        buffer += chunk
    check_sni(request.host, sni if isinstance(sni, str) else None)
    return buffer


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                stream: RequestStream | None = None, *,
                refused: Callable[[str], None] = lambda why: None) -> None:
    """``source``'s bytes to ``sink``, then its end-of-file. With ``stream`` (the client's side
    of a plain-HTTP connection), only what it lets through, each further head checked: at a
    refused one, ``refused`` hears why, and the upstream gets end-of-file and answers what it
    already has."""
    try:
        while (stream is None or stream.refused is None) and (data := await source.read(_CHUNK)):
            sink.write(data if stream is None else stream.feed(data))
            await sink.drain()
        if stream is not None and stream.refused is not None:
            refused(stream.refused)
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()


@contextlib.asynccontextmanager
async def egress_proxy(
    socket_path: Path, hosts: tuple[str, ...], resolver: Mapping[str, str] | None = None, *,
    internal: tuple[str, ...] = (), lookup: Lookup = system_lookup,
) -> AsyncIterator[EgressProxy]:
    """Serve an EgressProxy for ``hosts`` on ``socket_path`` for the duration of the block."""
    proxy = EgressProxy(hosts, resolver, internal=internal, lookup=lookup)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    server = await asyncio.start_unix_server(proxy.handle, path=os.fspath(socket_path))
    # Any uid in the sandbox may connect; only the sandbox can see the directory it lives in.
    os.chmod(socket_path, 0o666)
    try:
        yield proxy
    finally:
        server.close()
        await proxy.close_connections()
        await server.wait_closed()
        if proxy.unrecorded:
            log.warning("egress: %d more requests of this call were handled but not logged "
                        "(the first %d were)", proxy.unrecorded, EVENTS_KEPT)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
