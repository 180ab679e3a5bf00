"""Grants never reach the harness itself.

A mount or a path constraint that covers, sits inside, or sits above one of the harness's own
directories (its state, its sockets, the grants and jobs the owner wrote, where its secrets
come from, each call's scratch) would hand a tool the audit log, the sessions, memory, the
secrets, or a socket: a Unix socket in a read-only bind mount still accepts connections, so a
tool could answer its own approvals or submit calls as a fresh session. Such a grant is refused
at load, naming its file, the key, and the directory it reaches; it grants nothing.

The harness's code (``code_paths``) is protected from writing only (``writes_only``): a
writable mount over the toolkit's directory (or its parent) lets one call plant code that every
later sandbox runs; over a role's package or the Python environment the roles run from, code
the roles themselves run next time they start. A read-only mount of code changes nothing, shows
nothing secret, and every sandbox already sees the system's programs read-only. Writing needs a
writable mount (the sandbox's root, /usr and the toolkit are read-only in both backends), so
refusing those refuses every way to change the code. The code's paths are this brokerd's view:
its interpreter and environment, and where the roles' packages are installed beside it (the
local stack and the appliance run every role from one environment; a role run from elsewhere
is the owner's to protect).

Paths are compared after symlinks are resolved on both sides (the grant's by ``parse_grant``,
the harness's by the caller), so ``~`` reaching ``~/.local/state/boxmaker`` through a link is
caught as well. ``reaching`` is pure; ``code_paths`` looks at this process and the disk.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ._match import literal_prefix
from .grants import Grant


@dataclass(frozen=True, kw_only=True)
class Protected:
    """One harness directory (or file) no grant may reach, and what it is, for the message."""

    path: str  # absolute, resolved
    what: str  # e.g. "the state directory ([paths] home)"
    writes_only: bool = False  # code: only a writable mount may not reach it


def reaching(grant: Grant, protected: tuple[Protected, ...]) -> str | None:
    """Why ``grant`` reaches a protected path (its key and the path), or None when it does not."""
    for index, mount in enumerate(grant.mounts):
        hit = _overlap(str(mount.source), protected, writing=mount.writable)
        if hit is not None:
            how = "writable, " if hit.writes_only else ""
            return (f"sandbox.mounts.{index}.path ({mount.target}, {how}resolved "
                    f"{mount.source}) reaches {hit.what} at {hit.path}")
    for argument in grant.arguments:
        for index, glob in enumerate(argument.globs):
            prefix, _ = literal_prefix(glob)
            hit = _overlap(prefix, protected, writing=False)
            if hit is not None:
                return (f"arguments.{argument.name}.paths.{index} ({glob}) reaches {hit.what} "
                        f"at {hit.path}")
    return None


def _overlap(path: str, protected: tuple[Protected, ...], *, writing: bool) -> Protected | None:
    """The protected entry ``path`` reaches that names it best: of those it lies in, the
    deepest (the toolkit's package rather than the Python path it lies on); else the first it
    covers."""
    kept = [entry for entry in protected if writing or not entry.writes_only]
    inside = [entry for entry in kept if _under(path, entry.path)]
    if inside:
        return max(inside, key=lambda entry: len(entry.path))
    return next((entry for entry in kept if _under(entry.path, path)), None)


def _under(path: str, directory: str) -> bool:
    return Path(path).is_relative_to(directory)


ROLE_PACKAGES = ("bxcore", "brokerd", "loopd", "gatewayd", "memoryd", "inferproxy", "bxctl",
                 "toolkit")
# The programs brokerd runs a sandbox with
BACKEND_PROGRAMS = ("bwrap", "podman")
# podman's configuration: its hooks, runtimes and policies run code on the host for every
# container (the second attack on issue 31: writable grants over these loaded).
PODMAN_CONFIG = ("/etc/containers", "/usr/share/containers", "~/.config/containers")
# The system's programs, libraries and their configuration: bwrap (as root, for a root
# brokerd) loads its shared libraries from here and reads /etc/ld.so.*, and every bubblewrap
# sandbox runs the host's python3 with its standard library (the fourth attack on issue 31:
# writable grants over /usr/lib/python3.11 and /usr/lib/x86_64-linux-gnu loaded).
SYSTEM_CODE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def code_paths(toolkit_dir: Path | None) -> tuple[Protected, ...]:
    """The harness's code, resolved: the toolkit the sandboxes run (``[broker] toolkit_dir``,
    or the installed one), every role's package, the Python environment and installation the
    roles run from, the interpreter's directory, the sandbox programs' directories, podman's
    configuration, every directory on this process's PATH and Python path, and the system's
    programs and libraries."""
    found: list[tuple[str, str]] = []
    if toolkit_dir is not None:
        found.append((str(toolkit_dir), "the toolkit the sandboxes run ([broker] toolkit_dir)"))
    for name in ROLE_PACKAGES:
        spec = importlib.util.find_spec(name)  # located, never imported
        for location in (spec.submodule_search_locations or ()) if spec is not None else ():
            found.append((location, f"the harness's code (the {name} package)"))
    found += [
        (sys.prefix, "the Python environment the roles run from (sys.prefix)"),
        (sys.base_prefix, "the Python installation the roles run from (sys.base_prefix)"),
        (os.path.dirname(os.path.realpath(sys.executable)), "the interpreter's directory"),
    ]
    for program in BACKEND_PROGRAMS:
        if (where := shutil.which(program)) is not None:
            found.append((os.path.dirname(os.path.realpath(where)),
                          f"the directory of the sandbox program {program}"))
    found += [(os.path.expanduser(path), "podman's configuration, which runs code on the host")
              for path in PODMAN_CONFIG]
    # What brokerd runs by name and imports: a tool writing a directory on its PATH or its
    # Python path could put a bwrap or a module there that brokerd runs outside every sandbox
    # (attack 31j, E9).
    # An empty entry is the working directory, for a program's lookup as for an import
    # (attack 31k, K10).
    found += [(os.path.abspath(entry or "."), "a directory on brokerd's PATH, whose programs "
               "it runs") for entry in os.environ.get("PATH", "").split(os.pathsep)]
    found += [(os.path.abspath(entry or "."), "a directory on brokerd's Python path (sys.path)")
              for entry in sys.path]
    found += [(path, "the system's programs and libraries, which sandboxes and bwrap run")
              for path in SYSTEM_CODE if os.path.exists(path)]
    unique = {os.path.realpath(path): what for path, what in reversed(found)}
    # A Python installed with prefix / would protect every path: the packages found above, and
    # the sandbox's refusal to mount over /usr, /bin and /lib, cover its code there instead.
    return tuple(Protected(path=path, what=what, writes_only=True)
                 for path, what in sorted(unique.items()) if path != "/")
