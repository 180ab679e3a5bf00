"""Which addresses the egress proxy may connect to, and the IP literals grants may name. Pure.

brokerd has the host's network, and the host is a tailnet node, so a granted *name* must not
become a way in: DNS is not the owner's, and ``docs.example.org`` (or any name under a granted
``*.example.org``) can answer 127.0.0.1, a tailnet address or the cloud metadata address. The
proxy resolves a name once, refuses the call if any address it got is not a public one, and
connects to the vetted address itself. An internal address is reached only when the grant names
it (docs/grants.md):

- a ``[sandbox] hosts`` entry that is an IP literal (``10.0.0.5:8080``, ``[fd7a::5]:8080``):
  the tool may use that address itself;
- ``[sandbox] internal = ["100.64.0.0/10", "192.168.1.20"]``: the grant's names may resolve
  into these networks.

The unspecified address (Linux connects it to the local host) and multicast are refused even
then. An IPv6 address that carries an IPv4 one (``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``) is judged by the IPv4 address it carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

TAILNET_V4 = IPv4Network("100.64.0.0/10")  # CGNAT shared space; Tailscale's addresses
TAILNET_V6 = IPv6Network("fd7a:115c:a1e0::/48")
_NAT64 = IPv6Network("64:ff9b::/96")
_PRIVATE = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
    IPv6Network("fc00::/7"),
)

# First row that holds names the kind of address in a refusal. Python's own tables change
# between releases (3.11 calls 224.0.0.1, fec0::1 and ::7f00:1 global), so each row is explicit
# and ``is_global`` is only the last word.
_KINDS: tuple[tuple[str, Callable[[IPAddress], bool]], ...] = (
    ("loopback", lambda a: a.is_loopback),
    ("link-local", lambda a: a.is_link_local),
    ("in the tailnet's range 100.64.0.0/10 (CGNAT)", lambda a: a in TAILNET_V4),
    ("in the tailnet's range fd7a:115c:a1e0::/48", lambda a: a in TAILNET_V6),
    ("private", lambda a: any(a in net for net in _PRIVATE)),
    ("reserved", lambda a: a.is_reserved),
    ("site-local", lambda a: isinstance(a, IPv6Address) and a.is_site_local),
    ("special-purpose, not globally routable", lambda a: not a.is_global),
)


def address_refusal(address: str, named: Iterable[IPNetwork] = ()) -> str | None:
    """Why the proxy may not connect to ``address`` (as getaddrinfo gives it, a zone such as
    ``%eth0`` allowed), or None when it may: a public address, or one inside ``named``, the
    networks the grant names."""
    bare = ip_address(address.partition("%")[0])
    judged = _carried_v4(bare) or bare
    shown = address if judged is bare else f"{address} (IPv4 {judged})"
    if judged.is_unspecified:
        return f"{shown} is the unspecified address"
    if judged.is_multicast:
        return f"{shown} is multicast"
    if any(judged in net or bare in net for net in named):
        return None
    for kind, holds in _KINDS:
        if holds(judged):
            return f"{shown} is {kind}, not a public address"
    return None


def _carried_v4(address: IPAddress) -> IPv4Address | None:
    if not isinstance(address, IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def ip_literal(host: str) -> IPAddress | None:
    """``host`` as an address when it is an IP literal without a zone, else None."""
    if "%" in host:
        return None
    try:
        return ip_address(host)
    except ValueError:
        return None


def canonical_host(host: str) -> str:
    """A host as the allowlist compares it: an IP literal in its compressed form, a name in
    lower case without a trailing dot."""
    literal = ip_literal(host)
    return literal.compressed if literal is not None else host.lower().rstrip(".")


def split_host_port(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` -> (host without brackets, port or
    None). Raises ValueError for a bad port or a bare IPv6 address (brackets keep its colons
    apart from the port's)."""
    if entry.startswith("["):
        host, sep, after = entry[1:].partition("]")
        literal = ip_literal(host) if sep else None
        if not isinstance(literal, IPv6Address) or (after and not after.startswith(":")):
            raise ValueError(f"{entry!r}: write an IPv6 address as [address] or [address]:port")
        port_text = after.removeprefix(":") if after else None
    elif entry.count(":") > 1:
        raise ValueError(f"{entry!r}: write an IPv6 address in brackets, e.g. [{entry}]:443")
    else:
        host, sep, port_text = entry.partition(":")
        port_text = port_text if sep else None
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{entry!r}: bad port")
    return host, int(port_text)


def join_host_port(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def parse_network(entry: str) -> IPNetwork:
    """An ``internal`` entry: an address or a network (host bits zero), no zone."""
    try:
        return ip_network(entry, strict=True)
    except ValueError as exc:
        raise ValueError(f"not an IP address or network: {exc}") from None


def networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    return tuple(parse_network(entry) for entry in entries)
