"""Who may talk to a role's socket: the peer the kernel reports (SO_PEERCRED), checked on every
connection before a byte is read. ``admit`` is pure; ``peer_of`` and ``listener`` read the
kernel.

The socket's mode and group already decide who may ``connect()``; the peer check holds even
where they are wider than meant (a socket mode of 0666, a group with a stray member), and is
the layer that names who is refused. A peer is admitted when

1. the listener runs in a user namespace and the peer shows as the overflow uid: the appliance,
   where every role is a rootless container with its own host uid and sees the others as the
   overflow uid. No uid can name anyone there; the gate is the socket's directory (its group
   admits the roles meant to connect, see docs/decisions/socket-access.md), as for approve.sock's
   ``local:socket``; or
2. its uid is the listener's, one of the socket's ``uids`` (approve.sock: the ``local:<uid>``
   approvers), or it is a member of the socket's ``group`` (primary, from SO_PEERCRED, or
   supplementary, from SO_PEERGROUPS).

Both are the credentials the kernel captured when the peer connected, read from the socket
itself: never from ``/proc/<pid>``, which by the time it is read may be another process that
took the pid, or the same process after it changed its groups.

So a root brokerd's sandboxed tool, which runs as ``[broker] sandbox_uid``, is refused by every
socket. A non-root brokerd's tool runs as brokerd's own uid (in a user namespace, as loopd does
on the local stack), which no uid check can tell from a role: there the defence is that no
socket is ever in a sandbox (grants that reach the sockets' directory are refused at load).

A refusal closes the connection unanswered and is logged at WARNING with the socket, the peer's
uid and pid, and the reason.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

OVERFLOW_UID_FILE = Path("/proc/sys/kernel/overflowuid")
DEFAULT_OVERFLOW_UID = 65534
_INITIAL_UID_MAP = ("0", "0", "4294967295")


@dataclass(frozen=True, kw_only=True)
class Peer:
    pid: int  # 0 when the peer is in a PID namespace the listener cannot see
    uid: int
    groups: frozenset[int]  # primary and supplementary gids, as they were at connect()


@dataclass(frozen=True, kw_only=True)
class Listener:
    uid: int
    in_user_namespace: bool  # not the initial one: the listener is itself in a container
    overflow_uid: int


@dataclass(frozen=True, kw_only=True)
class PeerPolicy:
    """Who a socket admits besides its own uid: more uids, and the socket's group."""

    uids: frozenset[int] = frozenset()
    group: int | None = None


def admit(peer: Peer, me: Listener, policy: PeerPolicy) -> str | None:
    """None when ``peer`` may use the socket, else why not."""
    if me.in_user_namespace and peer.uid == me.overflow_uid:
        return None  # rule 1: the socket's directory is the gate
    if peer.uid == me.uid or peer.uid in policy.uids:
        return None
    if policy.group is not None and policy.group in peer.groups:
        return None
    return f"uid {peer.uid} is neither this role's uid nor allowed on this socket"


def peer_of(sock: socket.socket) -> Peer:
    """The peer of a connected socket, with its supplementary groups."""
    return _with_supplementary(sock, _credentials(sock))


def check_peer(sock: socket.socket, me: Listener, policy: PeerPolicy) -> tuple[Peer, str | None]:
    """The peer of ``sock`` and why ``admit`` refuses it (None: admitted).

    The supplementary groups are read only when the uid and primary group do not admit the
    peer already: more groups can only admit, never refuse, so the answer is the same, and the
    usual connection (a role's own uid) costs one system call. inferproxy checks one connection
    per completion."""
    peer = _credentials(sock)
    refused = admit(peer, me, policy)
    if refused is not None and policy.group is not None:
        peer = _with_supplementary(sock, peer)
        refused = admit(peer, me, policy)
    return peer, refused


def _credentials(sock: socket.socket) -> Peer:
    """SO_PEERCRED: pid, uid and the primary group only."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return Peer(pid=pid, uid=uid, groups=frozenset({gid}))


def _with_supplementary(sock: socket.socket, peer: Peer) -> Peer:
    return dataclasses.replace(peer, groups=peer.groups | supplementary_groups(sock))


# SO_PEERGROUPS (Linux 4.13): the peer's supplementary groups as the kernel captured them at
# connect(), mapped into this process's user namespace. Python's socket module may not name it.
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
# getsockopt's buffer: Python allows at most 1024 bytes, so 256 groups
_GROUPS_BUFFER = 1024


def supplementary_groups(sock: socket.socket) -> frozenset[int]:
    """The peer's supplementary gids from the socket itself. A peer with more than 256 groups
    (ERANGE) gets none: groups only ever admit, so the check fails closed."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, _GROUPS_BUFFER)
    except OSError as exc:
        if exc.errno == errno.ERANGE:
            return frozenset()
        raise
    return frozenset(struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4]))


def listener() -> Listener:
    try:
        uid_map = Path("/proc/self/uid_map").read_text(encoding="ascii").split()
    except OSError:
        uid_map = []
    return Listener(uid=os.geteuid(), in_user_namespace=tuple(uid_map) != _INITIAL_UID_MAP,
                    overflow_uid=overflow_uid())


def overflow_uid(path: Path = OVERFLOW_UID_FILE) -> int:
    """The uid a user namespace shows for one it does not map (the kernel's default if the
    file cannot be read)."""
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return DEFAULT_OVERFLOW_UID


__all__ = [
    "Listener", "Peer", "PeerPolicy", "admit", "check_peer", "listener", "overflow_uid", "peer_of",
    "supplementary_groups",
]
