"""What one approved call may touch: the plain description a sandbox backend runs.

Backends never receive a SandboxSpec on its own: they receive a ``Decision`` and take the spec
out of it with ``Decision.authorize()``, so nothing runs that policy did not allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bxcore.secrets import Secret
from bxcore.tools import DataClass

from ..labels import Ceiling


@dataclass(frozen=True, kw_only=True)
class Mount:
    source: Path  # on the host, fully resolved
    target: str  # inside the sandbox
    writable: bool = False


@dataclass(frozen=True, kw_only=True)
class OpenedPath:
    """The path a file tool opens, as policy decided it: brokerd resolved the call's ``path`` on
    the host and matched that, so the tool opens exactly it, below the mount it lies in and
    following no symlink (``toolkit.beneath``), never the model's text resolved again."""

    root: str  # the mount's target inside the sandbox
    relative: str  # the resolved path below the mount's source ("" for the source itself)
    host_path: str  # the resolved path on the host, what the globs match
    globs: tuple[str, ...] = ()  # the deciding grant's regexes for the path; () for none
    # Regexes of the directories a walk (fs.search) may enter: those that can hold a path the
    # globs match; () with no globs
    descend: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    memory_mb: int = 256
    pids: int = 64
    timeout_s: float = 60.0
    output_cap: int = 16 * 1024  # bytes of tool output kept


@dataclass(frozen=True, kw_only=True)
class SandboxSpec:
    program: str  # a toolkit tool name, e.g. "fs.read"
    arguments: str  # the call's JSON text, passed to the program unchanged
    mounts: tuple[Mount, ...] = ()
    hosts: tuple[str, ...] = ()  # egress allowlist; empty means no network at all
    # Networks (``10.0.0.0/8``) that are not public which the names in ``hosts`` may resolve
    # to; any other address a name resolves to that is not public is refused (brokerd.egress).
    internal: tuple[str, ...] = ()
    secrets: tuple[Secret, ...] = ()  # each injected as a file /run/secrets/<name>
    workdir: str | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    # The label the grant gives this call's results. Secret unless the grant says otherwise, so
    # a result is never labelled lower than intended by accident.
    data_class: DataClass = DataClass.SECRET
    # What a call with ``hosts`` may hold while it runs (its grant's classes, brokerd.labels);
    # None for a call without network.
    ceiling: Ceiling | None = None
    # The tool's settings from brokerd's config as JSON text (``bx-tool --settings``), e.g.
    # consult's endpoint. Configuration, never secrets; None for tools that have none.
    settings: str | None = None
    # Where a file tool's path is (fs.read, fs.list, fs.search, fs.write); None for other tools,
    # or when the path is in no mount of the grant (the tool then opens nothing).
    opened: OpenedPath | None = None


@dataclass(frozen=True, kw_only=True)
class ToolSettings:
    """What brokerd's config fixes for one tool: the settings its program is given, and what
    any grant for it must provide: exactly these egress hosts, at least these secrets."""

    text: str  # a JSON object
    hosts: tuple[str, ...]
    secrets: tuple[str, ...] = ()
