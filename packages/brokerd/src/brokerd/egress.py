"""The per-call egress proxy: an allowlisting HTTP proxy on a Unix socket.

When a grant names hosts, the sandbox backend starts one of these for the call, bind-mounts its
socket directory into the sandbox (where ``toolkit.bridge`` exposes it as 127.0.0.1:<port>),
and closes it, with every connection, when the call ends. The sandbox has no network of its
own, so this allowlist is all it can reach. Parsing and matching are pure
(``brokerd._egress_http``); this module only moves bytes.

``resolver`` maps host names to addresses without DNS (tests use it; so could an owner who
pins addresses); without it, names resolve through the system resolver when connecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ._egress_http import (
    TUNNEL_OPEN,
    BadProxyRequest,
    ProxyRequest,
    is_allowed,
    parse_allowlist,
    parse_head,
    refusal,
)

log = logging.getLogger("brokerd.egress")

HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class EgressEvent:
    """One request the proxy saw: what was asked and whether it was carried."""

    host: str
    port: int
    allowed: bool
    detail: str


class EgressProxy:
    def __init__(self, hosts: tuple[str, ...], resolver: Mapping[str, str] | None = None):
        self._rules = parse_allowlist(hosts)
        self._resolver = dict(resolver) if resolver is not None else None
        self._tasks: set[asyncio.Task[None]] = set()
        self.events: list[EgressEvent] = []

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
            self._note(request, False, "not in the grant's host list")
            details = f"{request.host}:{request.port} is not granted to this call"
            writer.write(refusal(403, "Forbidden", "destination_ip_prohibited", details))
            await writer.drain()
            return
        upstream = await self._connect(request, writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        try:
            if request.tunnel:
                writer.write(TUNNEL_OPEN)
            else:
                up_writer.write(request.head)
            up_writer.write(request.rest)
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            up_writer.close()

    async def _connect(
        self, request: ProxyRequest, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        address = request.host
        if self._resolver is not None:
            if request.host not in self._resolver:
                return await self._fail(request, writer, "destination_not_found", "unresolved")
            address = self._resolver[request.host]
        try:
            connection = await asyncio.wait_for(
                asyncio.open_connection(address, request.port), CONNECT_TIMEOUT_S
            )
        except (TimeoutError, OSError) as exc:
            detail = f"cannot connect: {exc}"
            return await self._fail(request, writer, "connection_refused", detail)
        self._note(request, True, "carried")
        return connection

    async def _fail(
        self, request: ProxyRequest, writer: asyncio.StreamWriter, error: str, detail: str
    ) -> None:
        self._note(request, False, detail)
        writer.write(refusal(502, "Bad Gateway", error, f"{request.host}:{request.port} {detail}"))
        await writer.drain()
        return None

    def _note(self, request: ProxyRequest, allowed: bool, detail: str) -> None:
        self.events.append(EgressEvent(request.host, request.port, allowed, detail))
        log.info("egress %s:%d %s (%s)", request.host, request.port,
                 "carried" if allowed else "refused", detail)

    async def close_connections(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


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


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()


@contextlib.asynccontextmanager
async def egress_proxy(
    socket_path: Path, hosts: tuple[str, ...], resolver: Mapping[str, str] | None = None
) -> AsyncIterator[EgressProxy]:
    """Serve an EgressProxy for ``hosts`` on ``socket_path`` for the duration of the block."""
    proxy = EgressProxy(hosts, resolver)
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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
