"""``decide``: one tool request and the grants in force, to one Decision. Pure.

No files, no clock, no parsing: the caller passes the call's arguments already parsed (one
``CallArguments``, parsed once per call by ``Broker.call``), the time, the session's taint, the
request's path arguments already resolved (symlinks and ``..`` gone) and every entry their
resolution read (``lookups``), the mount labels, and the secrets the grants name. The rules
(docs/grants.md):

1. Memory tools (recall, ask_memory, memory) and ``clock`` are allowed by built-in policy; no
   grant applies (``clock`` reads brokerd's clock and nothing else; every session has it).
2. Arguments that are not one JSON object: deny.
3. A grant matches when it names the tool (or ``*``), has not expired, and every argument it
   constrains satisfies the constraint. An auto or ask grant must also allow the session's
   taint: every class seen within its ``classes``, and ``allow_untrusted`` if the session read
   untrusted content; and every secret it injects must be available. A grant with egress must
   allow, the same way, the labels of everything its mounts can read (``brokerd.labels``):
   its call could send any of it out. (brokerd checks that again, with the calls running
   beside it, when the call starts.)
4. A tool whose settings brokerd's config fixes (consult: its endpoint) matches only grants
   whose ``[sandbox] hosts`` are exactly the hosts those settings connect to, and which inject
   the secrets they name.
5. A grant that injects secrets labels its results secret, whatever its ``result_class``
   says, when the tool runs code the model wrote or chose: the secret is in its sandbox. A
   tool whose settings brokerd's config fixes (consult) keeps the grant's class: its program
   and its endpoint are the owner's.
6. No matching grant: deny. Otherwise the most restrictive matching grant decides:
   deny over ask over auto; among equals, the first by name.
7. A decision that depends on mount labels (the labelled roots its path arguments resolve
   through, every one resolved, constrained or not: ``brokerd.beneath`` reads only beneath
   the tool's mounts and returns every entry it read; the mounts of a grant with egress that
   matches but for them) carries them (``Decision.consulted``): brokerd raises the
   session's taint and labels the answer with them, whatever it is, since a session of a
   higher class can have raised them. A grant with egress must then allow all of them, not
   only its own mounts' labels.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bxcore.protocol.memory import MEMORY_TOOLS
from bxcore.secrets import Secret
from bxcore.tools import CLOCK, DataClass, DecisionRecord, ToolRequest, Verdict
from bxcore.util import text_sha256

from ..labels import Ceiling, Label, covers_path, join_all, seen
from ..sandbox.spec import Mount, SandboxSpec, ToolSettings
from ..taint import Taint
from ._decision import Decision, mint
from ._match import host_allowed, host_of
from ._opened import OPENED_ARGUMENT, opened_path
from .grants import ArgumentConstraint, Grant

MEMORY_GRANT = "builtin:memory"
CLOCK_GRANT = "builtin:clock"
_STRICTNESS = {"deny": 2, "ask": 1, "auto": 0}
_VERDICT: dict[str, Verdict] = {"deny": "deny", "ask": "ask", "auto": "allow"}
NOT_AN_OBJECT = "the arguments are not one JSON object"


@dataclass(frozen=True, slots=True)
class CallArguments:
    """A call's arguments, parsed once where the call enters brokerd's logic (``Broker.call``)
    and handed to every step after it: ``decide``, the shell's path resolution, the egress log
    (the payload ``consult`` sends) and the delegate order; none parses the text again.

    ``text``: the call's JSON text, as the model wrote it (the audit hashes it and the sandbox
    hands it to the tool unchanged, so neither depends on how the value would be written
    back); ``value``: the JSON object it holds, or None when it holds none."""

    text: str
    value: Mapping[str, Any] | None

    @classmethod
    def parse(cls, text: str) -> CallArguments:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return cls(text=text, value=None)
        return cls(text=text, value=value if isinstance(value, dict) else None)

    def get(self, name: str) -> Any:
        """The argument ``name``, or None when it is absent or there is no object."""
        return None if self.value is None else self.value.get(name)


def path_arguments(tool: str, grants: tuple[Grant, ...]) -> frozenset[str]:
    """Argument names that brokerd resolves for ``tool``: the one its sandbox opens, and
    every one some grant for it constrains by path."""
    names: set[str] = set()
    if (opened := OPENED_ARGUMENT.get(tool)) is not None:
        names.add(opened)  # the sandbox opens it as resolved here (``_opened``)
    for grant in grants:
        if grant.applies_to(tool):
            names |= grant.path_arguments
    return frozenset(names)


def path_roots(tool: str, grants: tuple[Grant, ...]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Where each of ``path_arguments`` may be resolved (``brokerd.beneath``), as (how its
    text begins, the real directory): beneath a mount of a grant for ``tool`` (its source, or
    its target, which names the source), or the literal directory of a glob a grant for it
    gives that argument. Nothing outside them is read to answer the call."""
    applicable = [g for g in grants if g.applies_to(tool)]
    mounts = {(text, str(m.source)) for g in applicable for m in g.mounts
              for text in (str(m.source), m.target)}
    return {name: tuple(sorted(mounts | {(_literal_part(glob),) * 2 for g in applicable
                                         for c in g.arguments if c.name == name
                                         for glob in c.globs}))
            for name in path_arguments(tool, grants)}


def _literal_part(glob: str) -> str:
    """The directories of ``glob`` before its first wildcard: ``/n/**/*.md`` gives ``/n``."""
    parts = glob.split("/")
    wild = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")),
                len(parts))
    return "/".join(parts[:wild]) or "/"


def decide(
    request: ToolRequest,
    grants: tuple[Grant, ...],
    *,
    arguments: CallArguments,
    now: datetime,
    taint: Taint,
    resolved_paths: Mapping[str, str],
    secrets: Mapping[str, Secret],
    configured: Mapping[str, ToolSettings] | None = None,
    labels: Mapping[str, Label] | None = None,
    lookups: Mapping[str, Sequence[str]] | None = None,
) -> Decision:
    if arguments.text != request.arguments:
        raise ValueError(f"call {request.call}: the arguments given were parsed from another call")

    def record(verdict: Verdict, grant: str | None, reason: str) -> DecisionRecord:
        return DecisionRecord(
            session=request.session, call=request.call, tool=request.tool,
            arguments_sha256=text_sha256(request.arguments),
            verdict=verdict, grant=grant, reason=reason,
        )

    if request.tool in MEMORY_TOOLS:
        spec = SandboxSpec(program=request.tool, arguments=request.arguments)
        why = "memory tools are allowed by built-in policy"
        return mint(record("allow", MEMORY_GRANT, why), spec)
    if request.tool == CLOCK.name:
        spec = SandboxSpec(program=request.tool, arguments=request.arguments)
        return mint(record("allow", CLOCK_GRANT, "clock is allowed by built-in policy"), spec)
    if arguments.value is None:
        return mint(record("deny", None, NOT_AN_OBJECT), None)

    setup = (configured or {}).get(request.tool)
    labels = labels or {}
    applicable = [g for g in sorted(grants, key=lambda g: g.name) if g.applies_to(request.tool)]
    first = [_miss(grant, arguments.value, now, taint, resolved_paths, secrets) or
             _setup_miss(grant, setup) for grant in applicable]
    consulted = _consulted(applicable, first, arguments.value, resolved_paths, lookups or {},
                           labels)
    holds = consulted.join(Label(taint.highest or DataClass.PUBLIC, taint.untrusted))
    matching: list[Grant] = []
    misses: list[str] = []
    for grant, early in zip(applicable, first, strict=True):
        miss = early or _egress_miss(grant, holds, labels)
        if miss:
            misses.append(f"{grant.name}: {miss}")
        else:
            matching.append(grant)

    def decided(verdict: Verdict, grant: str | None, reason: str,
                spec: SandboxSpec | None) -> Decision:
        if not consulted.plain:
            reason += (f" (this answer depends on mount labels, {consulted.describe()}: "
                       "the session's taint rises to them)")
        return mint(record(verdict, grant, reason), spec, consulted)

    if not matching:
        why = "; ".join(misses) if misses else f"no grant names the tool {request.tool!r}"
        return decided("deny", None, f"no grant matches ({why})", None)

    chosen = max(matching, key=lambda g: _STRICTNESS[g.mode])  # max keeps the first of equals
    verdict = _VERDICT[chosen.mode]
    if verdict == "deny":
        return decided("deny", chosen.name, f"grant {chosen.name} denies it", None)
    reason = f"grant {chosen.name} allows it" if verdict == "allow" else \
        f"grant {chosen.name} allows it once the owner approves"
    return decided(verdict, chosen.name, reason,
                   _spec(chosen, request, secrets, setup, resolved_paths))


def _miss(
    grant: Grant,
    arguments: Mapping[str, Any],
    now: datetime,
    taint: Taint,
    resolved_paths: Mapping[str, str],
    secrets: Mapping[str, Secret],
) -> str | None:
    """Why ``grant`` does not match this call, or None when it does."""
    if grant.expires is not None and now >= grant.expires:
        return f"expired at {grant.expires.isoformat()}"
    for constraint in grant.arguments:
        why = _argument_miss(constraint, arguments, resolved_paths)
        if why:
            return why
    if grant.mode == "deny":
        return None  # a denial applies whatever the session has seen
    outside = taint.classes - grant.classes
    if outside:
        return f"the session has seen {', '.join(sorted(c.value for c in outside))} data"
    if taint.untrusted and not grant.allow_untrusted:
        return "the session has read untrusted content"
    missing = [name for name in grant.secrets if name not in secrets]
    if missing:
        return f"secret {missing[0]!r} is not available"
    return None


def _setup_miss(grant: Grant, setup: ToolSettings | None) -> str | None:
    """Why ``grant`` does not fit what the config fixes for its tool, or None."""
    if setup is None or grant.mode == "deny":
        return None
    if set(grant.hosts) != set(setup.hosts):
        return (f"its [sandbox] hosts {list(grant.hosts)} are not exactly {list(setup.hosts)}, "
                "where the configured tool connects")
    missing = [name for name in setup.secrets if name not in grant.secrets]
    if missing:
        return f"it does not inject the secret {missing[0]!r} the configured tool needs"
    return None


def ceiling_of(grant: Grant) -> Ceiling | None:
    """What a call of ``grant`` may hold while it runs: set for a grant with egress only."""
    return Ceiling(grant.classes, grant.allow_untrusted) if grant.hosts else None


def _consulted(applicable: list[Grant], first: list[str | None], arguments: Mapping[str, Any],
               resolved: Mapping[str, str], lookups: Mapping[str, Sequence[str]],
               labels: Mapping[str, Label]) -> Label:
    """The mount labels the decision depends on: those of the labelled roots its path
    arguments resolve through (``lookups``: every entry their resolution read; a symlink a
    call wrote there decides where they lead), and
    those of the mounts of every grant with egress that matches but for its ceiling (whether
    it matches then depends on them). Each of them can have been raised, or not, by a session
    of a higher class, so whatever the decision answers carries them (rule 7). The result
    class of every grant whose tree the resolution read is consulted too: where a symlink in
    it leads is that grant's data."""
    names = {c.name for g in applicable for c in g.arguments if c.paths is not None}
    names |= set(lookups)  # every argument resolved, constrained or not (a file tool's path)
    paths = [posixpath.normpath(v) for n in names
             if isinstance(v := arguments.get(n), str) and v.startswith("/")]
    paths += [resolved[n] for n in names if n in resolved]
    paths += [step for n in names for step in lookups.get(n, ())]
    found = join_all(label for root, label in labels.items()
                     if any(covers_path(root, p) for p in paths))
    # What the resolution read inside a grant's tree is that grant's data: a symlink there
    # decides the answer as much as a file's content would decide a result. A deny grant's tree
    # too: it is walked to match, and its class is secret unless the owner says otherwise.
    for grant in applicable:
        if any(covers_path(root, p) for root in _territory(grant) for p in paths):
            found = found.join(Label(grant.result_class, False))
    for grant, miss in zip(applicable, first, strict=True):
        if miss is None and ceiling_of(grant) is not None and grant.mode != "deny":
            found = found.join(seen(labels, [str(m.source) for m in grant.mounts]))
    return found


def _territory(grant: Grant) -> set[str]:
    """The host directories whose data ``grant`` classes: its mounts and its globs' literal
    directories (where ``path_roots`` lets a path argument resolve)."""
    return {str(m.source) for m in grant.mounts} | {
        _literal_part(glob) for c in grant.arguments for glob in c.globs}


def _egress_miss(grant: Grant, holds: Label, labels: Mapping[str, Label]) -> str | None:
    """Why a grant with egress does not match: the call would hold more than it may send
    (``holds``: the session's taint and the labels the decision consulted)."""
    ceiling = ceiling_of(grant)
    if ceiling is None or grant.mode == "deny" or ceiling.admits(holds):
        return None
    held = seen(labels, [str(m.source) for m in grant.mounts])
    return ("it reaches the network, which it allows only for " +
            ", ".join(sorted(c.value for c in grant.classes)) +
            ("" if grant.allow_untrusted else ", trusted") +
            f"; its mounts hold {held.describe()} data (their labels), and this decision "
            f"depends on labels {holds.describe()} with the session's taint")


def _argument_miss(
    constraint: ArgumentConstraint, arguments: Mapping[str, Any], resolved: Mapping[str, str]
) -> str | None:
    name = constraint.name
    if name not in arguments:
        return f"argument {name!r} is missing"
    value = arguments[name]
    if not isinstance(value, str):
        return f"argument {name!r} is not a string"
    if constraint.paths is not None:
        path = resolved.get(name)
        if path is None:
            return (f"argument {name!r} is not resolved: it is not an absolute path beneath a "
                    "mount or granted directory of this tool, or its symlinks leave it")
        if not any(glob.fullmatch(path) for glob in constraint.paths):
            # Never the resolved path: it can name what the model did not (brokerd's own
            # /proc/self/cwd, where a symlink points), only the text it gave.
            how = "" if path == value else " once symlinks and '..' are resolved"
            return f"argument {name!r} is outside the granted paths{how}"
    if constraint.hosts is not None:
        host = host_of(value)
        if host is None:
            return f"argument {name!r} names no clear http(s) host"
        if not host_allowed(host, constraint.hosts):
            return f"argument {name!r} names host {host}, not a granted one"
    if constraint.pattern is not None and not constraint.pattern.fullmatch(value):
        return f"argument {name!r} does not match the granted pattern"
    return None


def _spec(grant: Grant, request: ToolRequest, secrets: Mapping[str, Secret],
          setup: ToolSettings | None, resolved_paths: Mapping[str, str]) -> SandboxSpec:
    return SandboxSpec(
        program=request.tool,
        arguments=request.arguments,
        mounts=tuple(Mount(source=m.source, target=m.target, writable=m.writable)
                     for m in grant.mounts),
        hosts=grant.hosts,
        internal=grant.internal,
        secrets=tuple(secrets[name] for name in grant.secrets),
        workdir=grant.workdir,
        limits=grant.limits,
        data_class=grant.result_class if setup is not None or not grant.secrets
        else DataClass.SECRET,  # rule 5: the code that holds the secret can return it
        ceiling=ceiling_of(grant),
        settings=setup.text if setup is not None else None,
        opened=opened_path(request.tool, grant, resolved_paths),
    )


__all__ = ["CLOCK_GRANT", "MEMORY_GRANT", "MEMORY_TOOLS", "CallArguments", "Decision", "decide",
           "path_arguments", "path_roots"]
