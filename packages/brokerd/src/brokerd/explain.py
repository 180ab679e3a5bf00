"""A grant in words, for ``brokerd grants check``: what it lets run, and with what."""

from __future__ import annotations

from ._egress_addr import ip_literal, split_host_port
from .policy import Grant


def explain_grant(grant: Grant) -> str:
    tools = "any tool" if "*" in grant.tools else ", ".join(sorted(grant.tools))
    verb = {"auto": "allows", "ask": "allows after the owner approves",
            "deny": "denies"}[grant.mode]
    parts = [f"{verb} {tools}"]
    for arg in grant.arguments:
        if arg.paths is not None:
            parts.append(f"when {arg.name} resolves to a path matching "
                         + " or ".join(arg.globs))
        if arg.hosts is not None:
            parts.append(f"when {arg.name} names host " + " or ".join(arg.hosts))
        if arg.pattern is not None:
            parts.append(f"when {arg.name} matches /{arg.pattern.pattern}/")
    if grant.expires is not None:
        parts.append(f"until {grant.expires.isoformat()}")
    if grant.mode != "deny":
        classes = ", ".join(c.value for c in sorted(grant.classes))
        parts.append(f"in sessions that have seen only {classes} data"
                     + ("" if grant.allow_untrusted else " and no untrusted content"))
        parts.append(f"results labelled at least {grant.result_class.value}")
        mounts = [f"{m.target} ({'writable' if m.writable else 'read-only'})"
                  for m in grant.mounts]
        parts.append("mounts " + ", ".join(mounts) if mounts else "no paths mounted")
        parts.append(_network(grant))
        if grant.secrets:
            parts.append("secrets " + ", ".join(grant.secrets))
        if grant.workdir:
            parts.append(f"working in {grant.workdir}")
        limits = grant.limits
        parts.append(f"limits {limits.memory_mb} MB, {limits.pids} pids, {limits.timeout_s:g} s")
    return "; ".join(parts)


def _network(grant: Grant) -> str:
    if not grant.hosts:
        return "no network"
    internal = " and " + ", ".join(grant.internal) if grant.internal else ""
    reach = f"names reach public addresses{internal} only"
    if any(ip_literal(split_host_port(host)[0]) is not None for host in grant.hosts):
        reach += "; IP addresses as listed, internal or not"
    return f"network to {', '.join(grant.hosts)} ({reach})"
