"""Pure matchers for argument constraints: path globs, host patterns, regexes.

Path globs are matched against paths that the shell has already resolved (symlinks and ``..``
gone), so ``/home/o/notes/../.ssh/id`` is matched as ``/home/o/.ssh/id``.

Glob syntax: ``*`` matches within one path component, ``?`` one character of a component,
``**`` as a whole component any number of components (zero included: ``/a/**`` matches ``/a``
itself). Every other character is literal.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from .._egress_addr import canonical_host, ip_literal, join_host_port, split_host_port

GLOB_CHARS = frozenset("*?")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile an absolute glob into a regex matched against a whole resolved path."""
    if not pattern.startswith("/"):
        raise ValueError(f"a path glob must be absolute (or start with ~/): {pattern!r}")
    parts = pattern.strip("/").split("/") if pattern != "/" else []
    out = ""
    for part in parts:
        if part == "**":
            out += "(?:/[^/]+)*"
        elif "**" in part:
            raise ValueError(f"'**' must be a whole path component: {pattern!r}")
        else:
            out += "/" + _component(part)
    return re.compile(out or "/", re.DOTALL)


def _component(part: str) -> str:
    text = ""
    for char in part:
        if char == "*":
            text += "[^/]*"
        elif char == "?":
            text += "[^/]"
        else:
            text += re.escape(char)
    return text


def literal_prefix(pattern: str) -> tuple[str, str]:
    """Split an absolute glob into the directory part without glob characters and the rest:
    ``/home/o/notes/**/*.md`` -> (``/home/o/notes``, ``**/*.md``)."""
    parts = pattern.strip("/").split("/")
    for index, part in enumerate(parts):
        if GLOB_CHARS & set(part):
            return "/" + "/".join(parts[:index]), "/".join(parts[index:])
    return "/" + "/".join(parts), ""


_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"(?:\*\.)?(?:{_LABEL}\.)*{_LABEL}")


def check_host_pattern(pattern: str) -> str:
    """``docs.python.org`` (that host only), ``*.example.org`` (its subdomains only), or an IP
    address (written without brackets here: ``10.0.0.5``, ``fd7a::5``), kept in compressed form."""
    literal = ip_literal(pattern)
    if literal is not None:
        return literal.compressed
    lowered = pattern.lower()
    if not _HOST.fullmatch(lowered) or (lowered.startswith("*") and "." not in lowered[2:]):
        raise ValueError(f"not a host name or *.domain pattern: {pattern!r}")
    return lowered


def check_egress_host(entry: str) -> str:
    """A ``[sandbox] hosts`` entry: a host pattern for ports 80 and 443, or ``host:port`` for
    that one port (an endpoint on another port, e.g. a self-hosted OpenAI-compatible API). An IP
    literal names that address, internal or not; IPv6 goes in brackets (``[fd7a::5]:8080``)."""
    host, port = split_host_port(entry)
    return join_host_port(check_host_pattern(host), port)


def host_of(value: str) -> str | None:
    """The host an argument names: a URL's host (http or https), or a bare host name.

    None for anything ambiguous: backslashes, whitespace or control characters (parsers
    disagree on where such a URL's host is), another scheme, or no host at all.
    """
    if any(c == "\\" or c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return None
    if "://" in value:
        try:
            parts = urlsplit(value)
            host = parts.hostname
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            return None
        if parts.scheme.lower() not in ("http", "https") or not host:
            return None
        return canonical_host(host)
    if (literal := ip_literal(value)) is not None:
        return literal.compressed
    lowered = value.lower().rstrip(".")
    return lowered if _HOST.fullmatch(lowered) and not lowered.startswith("*") else None


def host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif host == pattern:
            return True
    return False
