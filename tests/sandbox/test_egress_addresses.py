"""The egress proxy connects only to public addresses unless the grant names the address: the
pure check (one row per kind of address), and the proxy on a real Unix socket, where a granted
name that resolves to 127.0.0.1 is refused while a web server listening there sees nothing."""

from __future__ import annotations

import asyncio
import socket

import pytest
from brokerd._egress_addr import address_refusal, networks
from brokerd.egress import egress_proxy, system_lookup


@pytest.mark.parametrize(
    ("address", "named", "refusal"),
    [
        ("8.8.8.8", (), None),
        ("2001:4860:4860::8888", (), None),
        ("::ffff:8.8.8.8", (), None),
        ("64:ff9b::808:808", (), None),  # NAT64 of a public address
        ("127.0.0.1", (), "127.0.0.1 is loopback"),
        ("127.8.9.10", (), "is loopback"),
        ("::1", (), "::1 is loopback"),
        ("::ffff:127.0.0.1", (), "::ffff:127.0.0.1 (IPv4 127.0.0.1) is loopback"),
        ("::ffff:10.1.2.3", (), "(IPv4 10.1.2.3) is private"),
        ("64:ff9b::7f00:1", (), "(IPv4 127.0.0.1) is loopback"),
        ("2002:7f00:1::1", (), "(IPv4 127.0.0.1) is loopback"),  # 6to4
        ("::7f00:1", (), "is reserved"),  # IPv4-compatible, deprecated
        ("10.1.2.3", (), "10.1.2.3 is private"),
        ("172.16.5.4", (), "is private"),
        ("192.168.1.1", (), "is private"),
        ("fd12:3456::1", (), "is private"),
        ("100.64.0.1", (), "is in the tailnet's range 100.64.0.0/10 (CGNAT)"),
        ("100.100.100.100", (), "100.64.0.0/10"),  # Tailscale's resolver
        ("fd7a:115c:a1e0::1", (), "is in the tailnet's range fd7a:115c:a1e0::/48"),
        ("169.254.169.254", (), "169.254.169.254 is link-local"),  # cloud metadata
        ("fe80::1", (), "is link-local"),
        ("fe80::1%eth0", (), "fe80::1%eth0 is link-local"),
        ("fec0::1", (), "is site-local"),
        ("0.0.0.0", (), "0.0.0.0 is the unspecified address"),
        ("::", (), "is the unspecified address"),
        ("224.0.0.1", (), "is multicast"),
        ("ff02::1", (), "is multicast"),
        ("240.0.0.1", (), "is reserved"),
        ("255.255.255.255", (), "is reserved"),
        ("192.0.2.1", (), "not globally routable"),  # documentation
        ("198.18.0.1", (), "not globally routable"),  # benchmarking
        ("2001:db8::1", (), "not globally routable"),
        # What the grant names is allowed, and only that.
        ("10.0.0.5", ("10.0.0.5",), None),
        ("10.0.0.6", ("10.0.0.5",), "10.0.0.6 is private"),
        ("100.101.102.103", ("100.64.0.0/10",), None),
        ("fd7a:115c:a1e0::5", ("fd7a:115c:a1e0::/48",), None),
        ("::ffff:10.0.0.5", ("10.0.0.5",), None),
        ("fe80::1%eth0", ("fe80::/10",), None),
        ("127.0.0.1", ("127.0.0.1",), None),
        ("10.0.0.5", ("fd00::/8",), "is private"),
        # Never, named or not: 0.0.0.0 connects to the local host, multicast is no destination.
        ("0.0.0.0", ("0.0.0.0/8",), "unspecified"),
        ("224.0.0.1", ("224.0.0.0/4",), "multicast"),
    ],
)
def test_which_addresses_a_call_may_reach(address, named, refusal):
    why = address_refusal(address, networks(named))
    if refusal is None:
        assert why is None
    else:
        assert why is not None and refusal in why and why.endswith(
            ("not a public address", "unspecified address", "multicast")
        )


def resolving_to(*addresses: str, calls: list[str] | None = None):
    """A lookup (not the trusted table) that answers every name with ``addresses``, as
    getaddrinfo would for a name whose DNS says so."""

    async def lookup(host: str, port: int):
        if calls is not None:
            calls.append(host)
        found = []
        for address in addresses:
            found += await system_lookup(address, port)
        return found

    return lookup


class Listener:
    """A web server on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\ninner")
        await writer.drain()
        writer.close()


HANG_GUARD_S = 60


async def exchange(path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(request)
    await writer.drain()
    # A hang guard, not a measurement: a tunnel carried by mistake would wait here forever.
    reply = await asyncio.wait_for(reader.read(), HANG_GUARD_S)
    writer.close()
    return reply


def run_proxy(tmp_path, hosts, requests, **options):
    """Each request (formatted with the listener's port) through a proxy for ``hosts``; the
    replies, the proxy's events and how many connections the listener accepted."""

    async def scenario():
        listener = Listener()
        async with listener as port:
            grant = tuple(h.format(port=port) for h in hosts)
            async with egress_proxy(tmp_path / "p.sock", grant, **options) as proxy:
                replies = [await exchange(tmp_path / "p.sock", r.format(port=port).encode())
                           for r in requests]
        return replies, proxy.events, listener.accepted

    return asyncio.run(scenario())


GET = "GET http://docs.example.test:{port}/x HTTP/1.1\r\n\r\n"
CONNECT = "CONNECT docs.example.test:{port} HTTP/1.1\r\n\r\n"


@pytest.mark.parametrize("request_head", [GET, CONNECT])
def test_a_granted_name_that_resolves_to_loopback_is_refused_and_nothing_is_reached(
    tmp_path, request_head
):
    replies, events, accepted = run_proxy(tmp_path, ["docs.example.test:{port}"],
                                          [request_head], lookup=resolving_to("127.0.0.1"))
    assert replies[0].startswith(b"HTTP/1.1 403 Forbidden\r\nProxy-Status: boxmaker-egress; "
                                 b"error=destination_ip_prohibited; details=\"docs.example.test:")
    assert b"127.0.0.1 is loopback, not a public address" in replies[0]
    assert [(e.host, e.allowed, e.detail) for e in events] == [
        ("docs.example.test", False, "127.0.0.1 is loopback, not a public address")]
    assert accepted == 0


def test_one_internal_address_among_public_ones_refuses_the_call(tmp_path):
    lookup = resolving_to("93.184.215.14", "::ffff:127.0.0.1")
    replies, events, accepted = run_proxy(tmp_path, ["docs.example.test:{port}"], [GET],
                                          lookup=lookup)
    assert b"::ffff:127.0.0.1 (IPv4 127.0.0.1) is loopback" in replies[0]
    assert not events[0].allowed and accepted == 0


def test_the_system_resolver_is_held_to_the_same_rule(tmp_path):
    # localhost resolves from /etc/hosts, without DNS: the real lookup path, refused.
    replies, events, accepted = run_proxy(
        tmp_path, ["localhost:{port}"], ["GET http://localhost:{port}/ HTTP/1.1\r\n\r\n"])
    assert b"error=destination_ip_prohibited" in replies[0] and b"is loopback" in replies[0]
    assert [e.allowed for e in events] == [False] and accepted == 0


def test_a_grant_that_names_the_network_reaches_it_through_the_vetted_address(tmp_path):
    calls: list[str] = []
    replies, events, accepted = run_proxy(
        tmp_path, ["docs.example.test:{port}"], [GET],
        internal=("127.0.0.0/8",), lookup=resolving_to("127.0.0.1", calls=calls))
    assert replies[0].endswith(b"inner") and accepted == 1
    # Resolved once, by the lookup; docs.example.test has no DNS of its own, so the connection
    # can only have gone to the address the check saw.
    assert calls == ["docs.example.test"]
    assert [(e.host, e.allowed) for e in events] == [("docs.example.test", True)]


def test_an_ip_literal_the_grant_names_is_reached_and_only_on_its_port(tmp_path):
    literal = "GET http://127.0.0.1:{port}/x HTTP/1.1\r\n\r\n"
    other_port = "GET http://127.0.0.1/x HTTP/1.1\r\n\r\n"
    replies, events, accepted = run_proxy(tmp_path, ["127.0.0.1:{port}"], [literal, other_port])
    assert replies[0].endswith(b"inner") and accepted == 1
    assert b"is not granted to this call" in replies[1]
    assert [e.allowed for e in events] == [True, False]


def test_a_name_beside_an_ip_literal_does_not_inherit_it(tmp_path):
    replies, events, accepted = run_proxy(
        tmp_path, ["127.0.0.1:{port}", "docs.example.test:{port}"], [GET],
        lookup=resolving_to("127.0.0.1"))
    assert b"is loopback" in replies[0] and accepted == 0
    assert [e.allowed for e in events] == [False]


def test_an_unresolvable_name_is_a_502_dns_error(tmp_path):
    async def fails(host: str, port: int):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    replies, events, _ = run_proxy(tmp_path, ["docs.example.test:{port}"], [GET], lookup=fails)
    assert replies[0].startswith(b"HTTP/1.1 502 Bad Gateway")
    assert b"error=dns_error" in replies[0] and not events[0].allowed


def test_the_trusted_table_is_configuration_and_not_checked(tmp_path):
    replies, events, accepted = run_proxy(tmp_path, ["docs.example.test:{port}"], [GET],
                                          resolver={"docs.example.test": "127.0.0.1"})
    assert replies[0].endswith(b"inner") and accepted == 1
    assert [(e.allowed, e.detail) for e in events] == [(True, "carried")]
