"""The owner's small TOML files (grants, jobs): which ones, their text, and whether a tool could
have written them.

A file's text is read from one descriptor, and what is checked is that descriptor: where it
really is (``/proc/self/fd``), who owns it, how many names it has, when it last changed. The
last closes a class, not a trick: a tool writes only while its call runs, and every write
(through any name, a second one since removed, or a descriptor kept open) sets the file's ctime,
which only the kernel sets; a file changed while a call that could write files ran is refused
until the owner saves it again when none runs (``brokerd.writeperiods``). Attacks 31j E10 and
31k K4, K11, K15.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from bxcore.visible import is_invisible

from .errors import BrokerError
from .writeperiods import Period, changed_while_writing


@dataclass(frozen=True)
class ToolReach:
    """What tools can write or could have: ``written`` (every root a call has had writable, and
    whether a running call can write it now), ``tools_uid`` (the uid tools run as when it is not
    brokerd's own) and ``periods`` (when calls that could write ran)."""

    written: Mapping[str, bool] = field(default_factory=dict)
    tools_uid: int | None = None
    periods: tuple[Period, ...] = ()


@dataclass(frozen=True)
class OwnerFile:
    path: Path
    text: str
    status: os.stat_result  # of the descriptor the text was read from
    where: Path  # where that descriptor's file is (/proc/self/fd)
    steps: tuple[Path, ...]  # every entry resolving ``path`` read, before it was opened


def toml_files(directory: Path, error: type[BrokerError], what: str) -> list[Path]:
    """The ``*.toml`` entries in ``directory``, sorted; none when it does not exist. Every one,
    a dangling symlink, a directory or a FIFO too: reading it refuses it, naming it, so a deny
    cannot vanish by no longer being a file (attack 31n, F2). ``error`` names every entry that
    only reads as one (``misnamed``): a deny saved so was skipped without a word (attack 31o,
    F3)."""
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise error(f"{directory}: cannot list the {what} directory: {exc.strerror}") from None
    if wrong := [entry for entry in entries if misnamed(entry)]:
        raise error(f"{', '.join(repr(str(entry)) for entry in wrong)}: named like {what} "
                    "files but not '<name>.toml' exactly (another case, white space or an "
                    "invisible character in the name, or inside a directory); rename or remove")
    return [entry for entry in entries if entry.suffix == ".toml"]


def misnamed(entry: Path) -> bool:
    """An entry a person reads as ``<name>.toml`` that is not one: its name so once case, white
    space and invisible characters are set aside, or a directory that holds such a name."""
    if entry.suffix == ".toml":
        return False
    if _reads_as_toml(entry.name):
        return True
    try:
        return entry.is_dir() and not entry.is_symlink() and any(
            _reads_as_toml(child.name) for child in entry.iterdir())
    except OSError:
        return False


def _reads_as_toml(name: str) -> bool:
    shown = "".join(c for c in name if not (is_invisible(c) or c.isspace()))
    return shown.casefold().endswith(".toml")


def read_owner_file(path: Path, limit: int, error: type[BrokerError], what: str) -> OwnerFile:
    """A regular UTF-8 file of at most ``limit`` bytes, read from one descriptor; ``error``
    names the file otherwise."""
    steps = tuple(resolution_steps(os.path.abspath(path)))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise error(f"{path}: not a regular file; not {what}")
        where = Path(os.readlink(f"/proc/self/fd/{fd}"))
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{path}: over {limit} bytes; not {what}")
    try:
        return OwnerFile(path, data.decode("utf-8"), status, where, steps)
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 (byte {exc.start})") from None


def tool_hand(file: OwnerFile, reach: ToolReach, writable: Sequence[Path] = ()) -> str | None:
    """Why ``file`` may say what a tool wrote, or None. ``writable``: more roots tools may
    write (a grant's own writable mounts)."""
    found = file.status
    period = changed_while_writing(found.st_ctime_ns, reach.periods)
    if period is not None:
        return (f"it changed while calls that could write files were running ({period.describe()}):"
                " a tool holding it open, or another name of it, could have written it; read "
                "it, then save it again (or `touch` it) while no call runs")
    if reach.tools_uid is not None and found.st_uid == reach.tools_uid:
        return (f"it belongs to uid {reach.tools_uid}, which tools run as: a tool made it; copy "
                "it in as yourself")
    if found.st_nlink > 1:
        return (f"it has {found.st_nlink} names (hard links): a tool holding another could "
                "rewrite it; keep one name, in its directory")
    # Every entry its resolution read, and where the opened file is: a symlink a tool can
    # swap on the way would hand it the file between a check and the read (attack 31k, K17).
    roots = [*writable, *map(Path, reach.written)]
    for entry in (*file.steps, file.where):
        for root in roots:
            if inside(entry, root):
                return (f"it is reached through {entry}, inside {root}, which tools may write or "
                        "have written: a tool could have written it; keep it out of granted trees")
    return None


def inside(entry: Path, root: Path) -> bool:
    """Whether ``entry`` lies below ``root``: a tool that writes ``root`` can replace it (not
    ``root`` itself, its own mount point)."""
    return entry != root and entry.is_relative_to(root)


def resolution_steps(path: str, links: int = 40) -> list[Path]:
    """Every directory entry resolving ``path`` reads, where it sits (its parent resolved): the
    path's own components and, through each symlink met, its target's (an owner's
    ``~/notes -> /data/sub`` reads ``/data/sub``, which a tool writing ``/data`` could swap)."""
    steps: list[Path] = []
    pending = list(PurePosixPath(path).parts[1:])
    where = Path("/")
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            where = where.parent
            continue
        entry = where / name
        steps.append(entry)
        try:
            target = PurePosixPath(os.readlink(entry)) if links > 0 else None
        except OSError:  # not a symlink, gone, or unreadable: the walk goes on as the kernel's
            target = None
        if target is not None:
            links -= 1
            where = Path("/") if target.is_absolute() else where
            pending = list(target.parts[1:] if target.is_absolute() else target.parts) + pending
        else:
            where = entry
    return steps
