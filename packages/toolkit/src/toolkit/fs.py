"""fs.read, fs.list, fs.search, fs.write: file tools that open the path brokerd decided.

The model's ``path`` only names the call in messages. What is opened is the path brokerd
resolved on the host and matched against the grant (``beneath.Opened``), below the mount it
lies in, with no symlink followed on the way (``beneath.open_decided``): a symlink swapped in
after the decision is refused, never read through. fs.search's walk goes down by directory
descriptors, follows no symlink, enters only directories that can hold a granted file, and
reads only the files the grant's globs match; fs.list shows the entries of the one directory
it was granted, symlinks marked and never followed.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

from .beneath import open_decided
from .result import Context, Result, ToolError, make_result

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

_WRITE_FLAGS = {
    "create": os.O_CREAT | os.O_EXCL,
    "overwrite": os.O_CREAT | os.O_TRUNC,
    "append": os.O_CREAT | os.O_APPEND,
}
# A file in a walk: never a symlink, never blocking on a FIFO someone planted
_WALKED_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _os_error(path: str, exc: OSError) -> ToolError:
    return ToolError(f"{path!r}: {exc.strerror or exc}")


def _decided(context: Context, path: str, flags: int, mode: int = 0o644) -> int:
    if not os.path.isabs(path):
        raise ToolError(f"{path!r}: paths must be absolute")
    try:
        return open_decided(context, flags, mode)
    except OSError as exc:
        raise _os_error(path, exc) from None


def read(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    fd = _decided(context, path, os.O_RDONLY)
    try:
        with os.fdopen(fd, "rb") as handle:
            handle.seek(args.get("offset", 0))
            data = handle.read(context.cap + 4)  # + 4: room to finish a UTF-8 character
            more = bool(handle.read(1))
    except OSError as exc:
        raise _os_error(path, exc) from None
    return make_result(context, data.decode("utf-8", errors="replace"), untrusted=False, cut=more)


def list_dir(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    fd = _decided(context, path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with os.scandir(fd) as found:
            entries = sorted(found, key=lambda entry: entry.name)
            lines = [_describe(entry) for entry in entries]
    except OSError as exc:
        raise _os_error(path, exc) from None
    finally:
        os.close(fd)
    return make_result(context, "\n".join(lines), untrusted=False)


def _describe(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"{entry.name}@"
    if entry.is_dir(follow_symlinks=False):
        return f"{entry.name}/"
    return f"{entry.name}\t{entry.stat(follow_symlinks=False).st_size}"


def search(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    try:
        pattern = re.compile(args["pattern"])
    except re.error as exc:
        raise ToolError(f"pattern: not a valid regular expression: {exc}") from None
    limit = args.get("max_matches", 100)
    found: list[str] = []
    fd = _decided(context, path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        for name, file in _files(context, fd, path):
            for number, line in _lines(file):
                if pattern.search(line):
                    found.append(f"{name}:{number}:{line}")
                    if len(found) >= limit:
                        return make_result(context, "\n".join(found), untrusted=False, cut=True)
    finally:
        os.close(fd)
    return make_result(context, "\n".join(found), untrusted=False)


def _files(context: Context, fd: int, path: str) -> Iterator[tuple[str, int]]:
    """(name, descriptor) of each regular file to search: the decided file itself, or every
    file below the decided directory that the grant's globs match, in sorted order, reached
    without following a symlink (``os.fwalk`` opens each directory by descriptor and checks it
    is the one it listed) and without entering a directory the globs leave out."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISDIR(mode):
        if stat.S_ISREG(mode):
            yield path, os.dup(fd)
        return
    opened = context.opened
    if opened is None:  # open_decided would have refused; for the type checker
        return
    for directory, dirs, files, directory_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
        # only into directories that can hold a granted file, in order
        dirs[:] = sorted(d for d in dirs if opened.enters(os.path.normpath(f"{directory}/{d}")))
        for name in sorted(files):
            below = os.path.normpath(os.path.join(directory, name))
            if not opened.granted(below):
                continue
            try:
                file = os.open(name, _WALKED_FILE, dir_fd=directory_fd)
            except OSError:
                continue  # a symlink (ELOOP), or gone: skipped, never followed
            if stat.S_ISREG(os.fstat(file).st_mode):
                yield below, file
            else:
                os.close(file)


def _lines(fd: int) -> Iterator[tuple[int, str]]:
    """The lines of the open file ``fd``, which this closes."""
    try:
        with open(fd, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                yield number, line.rstrip("\n")
    except OSError:
        return  # unreadable files are skipped, as grep -s does


def write(context: Context, args: dict[str, Any]) -> Result:
    path = args["path"]
    mode = args.get("mode", "create")
    data = args["content"].encode("utf-8")
    fd = _decided(context, path, os.O_WRONLY | _WRITE_FLAGS[mode])
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise _os_error(path, exc) from None
    return make_result(context, f"wrote {len(data)} bytes to {path} ({mode})", untrusted=False)
