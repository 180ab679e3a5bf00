"""Sockets systemd opened for this process (socket activation, sd_listen_fds(3)).

A role's ``.socket`` unit holds its listening socket whether the role runs or not: a client
that connects while the role restarts waits in the socket's queue instead of failing, and the
roles need no start order among themselves. systemd passes the sockets to the service as
descriptors 3, 4, ... with ``LISTEN_FDS=<count>`` and ``LISTEN_PID=<the pid meant>``; podman
hands them on into the container with ``LISTEN_PID=1``, the role's own pid there.

``inherited_socket(path)`` is how ``bxcore.daemon`` takes one: the descriptors are read once
per process (only when ``LISTEN_PID`` is this process; the variables are removed either way, so
no child of the role sees them, and each descriptor is made close-on-exec), each is matched to
the path it listens on, and a path is taken at most once. A role started without them binds its
own socket, as it always did.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import MutableMapping
from pathlib import Path

LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START
VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")

log = logging.getLogger("bxcore.activation")


def listen_fds(environ: MutableMapping[str, str], pid: int) -> list[int]:
    """The descriptors systemd passed to ``pid``, as sd_listen_fds(unset_environment=1) finds
    them: none unless ``LISTEN_PID`` is ``pid`` and ``LISTEN_FDS`` a count; the variables are
    removed from ``environ`` whatever they held; each descriptor is made close-on-exec."""
    meant = environ.get("LISTEN_PID", "")
    count = environ.get("LISTEN_FDS", "")
    for name in VARIABLES:
        environ.pop(name, None)
    if meant != str(pid) or not count.isdigit():
        return []
    descriptors = list(range(LISTEN_FDS_START, LISTEN_FDS_START + int(count)))
    for fd in descriptors:
        os.set_inheritable(fd, False)
    return descriptors


def listening_path(sock: socket.socket) -> str | None:
    """The path a passed descriptor listens on, or None if it is no listening Unix stream
    socket bound to a path (such a descriptor is not for a role socket and is left alone)."""
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        return None
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return None
    name = sock.getsockname()
    if not isinstance(name, str) or not name.startswith("/"):
        return None  # an abstract or unnamed socket
    return os.path.normpath(name)


@functools.cache
def _inherited() -> dict[str, socket.socket]:
    """This process's passed sockets by the path each listens on; read once."""
    found: dict[str, socket.socket] = {}
    for fd in listen_fds(os.environ, os.getpid()):
        try:
            sock = socket.socket(fileno=fd)
        except OSError as exc:  # not a socket at all
            log.warning("descriptor %d from systemd is not a socket (%s); left alone", fd, exc)
            continue
        path = listening_path(sock)
        if path is None:
            log.warning("descriptor %d from systemd is not a listening Unix socket on a path; "
                        "left alone", fd)
            sock.detach()
            continue
        found[path] = sock
    if found:
        log.info("sockets from systemd: %s", ", ".join(sorted(found)))
    return found


def is_passed(path: Path) -> bool:
    """Whether systemd passed a socket for ``path`` that is not taken yet."""
    return os.path.normpath(os.path.abspath(path)) in _inherited()


def inherited_socket(path: Path) -> socket.socket | None:
    """The listening socket systemd passed for ``path``, once; None when it passed none."""
    return _inherited().pop(os.path.normpath(os.path.abspath(path)), None)


__all__ = [
    "LISTEN_FDS_START", "VARIABLES", "inherited_socket", "is_passed", "listen_fds",
    "listening_path",
]
