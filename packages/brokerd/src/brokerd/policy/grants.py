"""Grant files: the owner's TOML, parsed once into frozen, validated values.

One file is one grant; its name (the file's stem) identifies it in decisions and the audit log.
The rules are in docs/grants.md. Parsing is pure except for ``resolve``, which the caller passes
in: it turns the literal directory part of every glob and mount into a real path, so a grant for
``~/notes/**`` still matches when ``~/notes`` is a symlink.

A bad file raises GrantError naming the file and the dotted key; the caller treats such a file as
granting nothing. ``explain_grant`` says a parsed grant in words (``brokerd grants check``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from bxcore.config import describe
from bxcore.tools import DataClass
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .._egress_addr import ip_literal, parse_network, split_host_port
from ..errors import GrantError
from ..sandbox.spec import SandboxLimits
from ._match import check_egress_host, check_host_pattern, glob_regex, literal_prefix

Mode = Literal["auto", "ask", "deny"]
Resolve = Callable[[str], str]
WILDCARD = "*"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SECRET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ArgumentRule(_File):
    """Constraints on one argument; every key given must hold."""

    paths: list[str] | None = None
    hosts: list[str] | None = None
    pattern: str | None = None

    @model_validator(mode="after")
    def _something(self) -> ArgumentRule:
        if self.paths is None and self.hosts is None and self.pattern is None:
            raise ValueError("give at least one of 'paths', 'hosts', 'pattern'")
        if self.paths == [] or self.hosts == []:
            raise ValueError("an empty list would match nothing; remove the key or add entries")
        return self

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [check_host_pattern(h) for h in value]

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value


class MountEntry(_File):
    path: str
    write: bool = False


class LimitsEntry(_File):
    memory_mb: Annotated[int, Field(ge=16, le=65536)] = SandboxLimits.memory_mb
    pids: Annotated[int, Field(ge=1, le=4096)] = SandboxLimits.pids
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = SandboxLimits.timeout_s
    output_cap: Annotated[int, Field(ge=64, le=16 * 1024 * 1024)] = SandboxLimits.output_cap

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        # TOML writes 30 and 30.0 differently; both mean seconds.
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class SandboxEntry(_File):
    mounts: list[MountEntry] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)
    internal: list[str] = Field(default_factory=list)
    secrets: list[str] = Field(default_factory=list)
    workdir: str | None = None
    limits: LimitsEntry = Field(default_factory=LimitsEntry)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [check_egress_host(h) for h in value]

    @field_validator("internal")
    @classmethod
    def _internal(cls, value: list[str]) -> list[str]:
        return [str(parse_network(entry)) for entry in value]

    @model_validator(mode="after")
    def _internal_needs_hosts(self) -> SandboxEntry:
        if self.internal and not self.hosts:
            raise ValueError("'internal' says where the names in 'hosts' may resolve; "
                             "give 'hosts' or remove it")
        return self

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _SECRET.fullmatch(name):
                raise ValueError(f"not a secret name: {name!r}")
        return value


class GrantFile(_File):
    tools: Annotated[list[str], Field(min_length=1)]
    mode: Mode
    classes: list[DataClass] | None = None
    result_class: DataClass = DataClass.SECRET  # never lower than meant by accident
    allow_untrusted: bool = False  # the safe default: say so to use it after untrusted text
    expires: datetime | None = None
    arguments: dict[str, ArgumentRule] = Field(default_factory=dict)
    sandbox: SandboxEntry | None = None

    @field_validator("classes", mode="before")
    @classmethod
    def _classes(cls, value: object) -> object:
        # strict mode refuses strings for enums; TOML has no enums, so convert here.
        if isinstance(value, list):
            return [_data_class(v) for v in value]
        return value

    @field_validator("result_class", mode="before")
    @classmethod
    def _result_class(cls, value: object) -> object:
        return _data_class(value)

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        for name in value:
            if name != WILDCARD and not _NAME.fullmatch(name):
                raise ValueError(f"not a tool name: {name!r}")
        return value

    @field_validator("expires")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("give a time zone, e.g. 2027-01-31T00:00:00Z")
        return value

    @model_validator(mode="after")
    def _by_mode(self) -> GrantFile:
        if self.mode == "deny":
            if self.sandbox is not None:
                raise ValueError("a deny grant runs nothing: remove [sandbox]")
            return self
        if WILDCARD in self.tools:
            raise ValueError("tools = ['*'] is only allowed with mode = 'deny'")
        if not self.classes:
            raise ValueError(
                "an auto or ask grant must list 'classes' (the session taint it allows)"
            )
        return self


def _data_class(value: object) -> object:
    """A TOML string naming a data class becomes the enum; anything else is left for the
    strict validator to refuse with its own message."""
    if isinstance(value, str) and value in DataClass._value2member_map_:
        return DataClass(value)
    return value


@dataclass(frozen=True, kw_only=True)
class ArgumentConstraint:
    name: str
    paths: tuple[re.Pattern[str], ...] | None = None
    globs: tuple[str, ...] = ()  # the path globs as matched (resolved), for explanations
    hosts: tuple[str, ...] | None = None
    pattern: re.Pattern[str] | None = None


@dataclass(frozen=True, kw_only=True)
class GrantMount:
    source: Path  # resolved on the host
    target: str  # as the owner wrote it, ~ expanded: the path the tool is given
    writable: bool


@dataclass(frozen=True, kw_only=True)
class Grant:
    name: str
    tools: frozenset[str]
    mode: Mode
    classes: frozenset[DataClass]
    result_class: DataClass
    allow_untrusted: bool
    expires: datetime | None
    arguments: tuple[ArgumentConstraint, ...]
    mounts: tuple[GrantMount, ...] = ()
    hosts: tuple[str, ...] = ()
    internal: tuple[str, ...] = ()  # networks that are not public which ``hosts`` may reach
    secrets: tuple[str, ...] = ()
    workdir: str | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    def applies_to(self, tool: str) -> bool:
        return tool in self.tools or WILDCARD in self.tools

    @property
    def path_arguments(self) -> frozenset[str]:
        return frozenset(a.name for a in self.arguments if a.paths is not None)


def parse_grant(text: str, source: str | Path, *, home: Path, resolve: Resolve) -> Grant:
    """Validate one grant file's text. ``source`` names it in errors; its stem names the grant."""
    name = Path(source).stem
    if not _NAME.fullmatch(name):
        raise GrantError(f"{source}: the file name must be a plain grant name ({name!r} is not)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GrantError(f"{source}: not valid TOML: {exc}") from None
    try:
        entry = GrantFile.model_validate(data)
    except ValidationError as exc:
        raise GrantError(describe(exc, source)) from None
    try:
        return _compile(name, entry, home, resolve)
    except ValueError as exc:
        raise GrantError(f"{source}: {exc}") from None


def _compile(name: str, entry: GrantFile, home: Path, resolve: Resolve) -> Grant:
    def path(text: str, key: str) -> str:
        expanded = str(home) + text[1:] if text == "~" or text.startswith("~/") else text
        if not expanded.startswith("/"):
            raise ValueError(f"{key}: a path must be absolute or start with ~/ (got {text!r})")
        return expanded

    def resolved_glob(text: str, key: str) -> str:
        prefix, rest = literal_prefix(path(text, key))
        return (resolve(prefix).rstrip("/") + ("/" + rest if rest else "")) or "/"

    def compiled(glob: str, key: str) -> re.Pattern[str]:
        try:
            return glob_regex(glob)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None

    arguments = []
    for arg, rule in sorted(entry.arguments.items()):
        key = f"arguments.{arg}.paths"
        globs = tuple(resolved_glob(p, f"{key}.{i}") for i, p in enumerate(rule.paths or ()))
        arguments.append(ArgumentConstraint(
            name=arg,
            paths=None if rule.paths is None else tuple(
                compiled(g, f"{key}.{i}") for i, g in enumerate(globs)
            ),
            globs=globs,
            hosts=None if rule.hosts is None else tuple(rule.hosts),
            pattern=None if rule.pattern is None else re.compile(rule.pattern),
        ))
    sandbox = entry.sandbox or SandboxEntry()
    mounts = []
    for i, mount in enumerate(sandbox.mounts):
        target = path(mount.path, f"sandbox.mounts.{i}.path")
        if target.rstrip("/") == "":
            raise ValueError(f"sandbox.mounts.{i}.path: mounting / is never granted")
        mounts.append(GrantMount(source=Path(resolve(target)), target=target, writable=mount.write))
    workdir = None
    if sandbox.workdir is not None:
        workdir = path(sandbox.workdir, "sandbox.workdir")
        if not any(_under(workdir, m.target) for m in mounts):
            raise ValueError("sandbox.workdir: must be inside one of sandbox.mounts")
    limits = SandboxLimits(**sandbox.limits.model_dump())
    return Grant(
        name=name,
        tools=frozenset(entry.tools),
        mode=entry.mode,
        classes=frozenset(entry.classes or ()),
        result_class=entry.result_class,
        allow_untrusted=entry.allow_untrusted,
        expires=entry.expires,
        arguments=tuple(arguments),
        mounts=tuple(mounts),
        hosts=tuple(sandbox.hosts),
        internal=tuple(sandbox.internal),
        secrets=tuple(sandbox.secrets),
        workdir=workdir,
        limits=limits,
    )


def _under(path: str, directory: str) -> bool:
    directory = directory.rstrip("/")
    return path == directory or path.startswith(directory + "/")


def explain_grant(grant: Grant) -> str:
    """A grant in words, for ``brokerd grants check``: what it lets run, and with what."""
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
