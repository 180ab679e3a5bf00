"""fs.read, fs.list, fs.search, fs.write: file tools confined to the granted roots.

The sandbox mounts only the granted paths, which is the real boundary. These tools also resolve
every path (symlinks and ``..``) and refuse one that lands outside the roots brokerd named, so
a symlink planted in a granted directory gets a clear refusal instead of whatever the sandbox's
own system directories hold at that path.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

from .result import Context, Result, ToolError, make_result

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

_WRITE_FLAGS = {
    "create": os.O_CREAT | os.O_EXCL,
    "overwrite": os.O_CREAT | os.O_TRUNC,
    "append": os.O_CREAT | os.O_APPEND,
}


def resolve_inside(context: Context, path: str) -> str:
    """The fully resolved ``path``, or ToolError if it is relative or outside every root."""
    if not os.path.isabs(path):
        raise ToolError(f"{path!r}: paths must be absolute")
    real = os.path.realpath(path)
    for root in context.roots:
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return real
    raise ToolError(f"{path!r} is outside the granted paths")


def _os_error(path: str, exc: OSError) -> ToolError:
    return ToolError(f"{path!r}: {exc.strerror or exc}")


def read(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    real = resolve_inside(context, path)
    try:
        with open(real, "rb") as handle:
            handle.seek(args.get("offset", 0))
            data = handle.read(context.cap + 4)  # + 4: room to finish a UTF-8 character
            more = bool(handle.read(1))
    except OSError as exc:
        raise _os_error(path, exc) from None
    return make_result(context, data.decode("utf-8", errors="replace"), untrusted=False, cut=more)


def list_dir(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    real = resolve_inside(context, path)
    try:
        entries = sorted(os.scandir(real), key=lambda entry: entry.name)
        lines = [_describe(entry) for entry in entries]
    except OSError as exc:
        raise _os_error(path, exc) from None
    return make_result(context, "\n".join(lines), untrusted=False)


def _describe(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"{entry.name}@"
    if entry.is_dir():
        return f"{entry.name}/"
    return f"{entry.name}\t{entry.stat().st_size}"


def search(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    try:
        pattern = re.compile(args["pattern"])
    except re.error as exc:
        raise ToolError(f"pattern: not a valid regular expression: {exc}") from None
    real = resolve_inside(context, path)
    limit = args.get("max_matches", 100)
    found: list[str] = []
    for file in _files_under(context, real):
        for number, line in _lines(file):
            if pattern.search(line):
                found.append(f"{os.path.relpath(file, real) if file != real else file}"
                             f":{number}:{line}")
                if len(found) >= limit:
                    return make_result(context, "\n".join(found), untrusted=False, cut=True)
    return make_result(context, "\n".join(found), untrusted=False)


def _files_under(context: Context, real: str) -> Iterator[str]:
    """Regular files at or below ``real``, in sorted order, skipping any whose resolved path
    leaves the granted roots (a symlink planted inside pointing out)."""
    if not os.path.isdir(real):
        yield real
        return
    for directory, dirs, files in os.walk(real, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            candidate = os.path.join(directory, name)
            try:
                inside = resolve_inside(context, candidate)
            except ToolError:
                continue
            if stat.S_ISREG(os.stat(inside).st_mode):
                yield inside


def _lines(file: str) -> Iterator[tuple[int, str]]:
    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                yield number, line.rstrip("\n")
    except OSError:
        return  # unreadable files are skipped, as grep -s does


def write(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    mode = args.get("mode", "create")
    # Resolve the directory only: the file itself is opened with O_NOFOLLOW below, so a symlink
    # in its place is refused rather than written through.
    real = resolve_inside(context, os.path.join(os.path.dirname(path), "."))
    real = os.path.join(real, os.path.basename(path))
    data = args["content"].encode("utf-8")
    try:
        fd = os.open(real, os.O_WRONLY | os.O_NOFOLLOW | _WRITE_FLAGS[mode], 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise _os_error(path, exc) from None
    return make_result(context, f"wrote {len(data)} bytes to {path} ({mode})", untrusted=False)
