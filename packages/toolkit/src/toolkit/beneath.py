"""Open the path brokerd decided, below its mount, following no symlink on the way.

brokerd resolves a file tool's ``path`` on the host and matches that resolved path against the
grant; the toolkit must then open exactly it. Resolving the model's path again inside the
sandbox would open whatever a concurrent writer (another call with the directory writable, a
running ``shell.run``) has swapped in since, a symlink to a file outside the glob included. So
brokerd passes the mount the path lies in and the path relative to it (``Opened``), and every
open here starts at that mount's root and refuses a symlink at any component below it: one
``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` where the kernel
has it (Linux 5.6), else one ``openat(O_NOFOLLOW)`` per component from the root's descriptor,
which is as strict because the relative path holds no ``.`` or ``..`` (refused here).
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    import re

    from .result import Context

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# openat2: the syscall number is the same on every architecture (added after the tables were
# unified); the flags are linux/openat2.h's.
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_openat2_works: bool | None = None  # None: not tried yet


class Opened:
    """Where the decided path is: the mount's root inside the sandbox, the path below it
    (``""`` for the root itself), the path as brokerd resolved it on the host (what the
    grant's globs match), those globs (regexes; none when the grant constrains no path), and
    the directories that can hold a path they match (regexes)."""

    __slots__ = ("descend", "globs", "host_path", "relative", "root")

    def __init__(self, root: str, relative: str, host_path: str,
                 globs: tuple[re.Pattern[str], ...], descend: tuple[re.Pattern[str], ...] = ()):
        self.root = root
        self.relative = relative
        self.host_path = host_path
        self.globs = globs
        self.descend = descend

    def granted(self, below: str) -> bool:
        """Whether the file ``below`` (relative to the opened path) is inside the grant's
        globs: a walk reads only those."""
        return not self.globs or self._matches(self.globs, below)

    def enters(self, below: str) -> bool:
        """Whether a walk goes into the directory ``below``: only one that can hold a path the
        globs match."""
        return not self.globs or self._matches(self.descend, below)

    def _matches(self, regexes: tuple[re.Pattern[str], ...], below: str) -> bool:
        host = self.host_path.rstrip("/") + "/" + below
        return any(regex.fullmatch(host) for regex in regexes)


class SymlinkRefused(OSError):
    """A symlink, or something that is not below the mount, where the decided path was."""


def open_decided(context: Context, flags: int, mode: int = 0o644) -> int:
    """A descriptor for the decided path, opened with ``flags``; OSError (SymlinkRefused for a
    symlink on the way) for the caller to report with the path the model gave."""
    opened = context.opened
    if opened is None or opened.root not in context.roots:
        raise FileNotFoundError(errno.ENOENT, "outside the granted paths")
    parts = opened.relative.split("/") if opened.relative else []
    if any(part in ("", ".", "..") for part in parts):
        raise SymlinkRefused(errno.EXDEV, "not a plain path below the granted directory")
    if not parts:  # the mount's root itself, which the sandbox made: no symlink to meet
        return os.open(opened.root, flags | os.O_CLOEXEC, mode)
    root = os.open(opened.root, _DIRECTORY)
    try:
        return open_below(root, parts, flags, mode)
    finally:
        os.close(root)


def open_below(directory: int, parts: list[str], flags: int, mode: int = 0o644) -> int:
    """``parts`` opened below the descriptor ``directory``, no symlink followed."""
    global _openat2_works
    if _openat2_works is not False:
        try:
            fd = _openat2(directory, "/".join(parts), flags, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM) or _openat2_works:
                raise _refusal(exc) from None
            _openat2_works = False  # an old kernel, or a filter that refuses it
        else:
            _openat2_works = True
            return fd
    return _open_each(directory, parts, flags, mode)


def _open_each(directory: int, parts: list[str], flags: int, mode: int) -> int:
    current = directory
    try:
        for part in parts[:-1]:
            following = os.open(part, _DIRECTORY, dir_fd=current)
            if current != directory:
                os.close(current)
            current = following
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
    except OSError as exc:
        raise _refusal(exc) from None
    finally:
        if current != directory:
            os.close(current)


def _refusal(exc: OSError) -> OSError:
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return SymlinkRefused(exc.errno, "a symlink is on the way (the path must not pass "
                                         "through a symlink below the granted directory)")
    return exc


def _openat2(directory: int, path: str, flags: int, mode: int) -> int:
    import ctypes  # only here: most calls never get this far

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                    ("resolve", ctypes.c_uint64)]

    how = OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                  _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(directory),
                      ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                      ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return int(fd)
