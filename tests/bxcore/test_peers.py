"""Who a role's socket admits (``bxcore.peers.admit``, pure): one row per rule."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from bxcore import peers
from bxcore.peers import Listener, Peer, PeerPolicy, admit

ROLE, OWNER, TOOL, OVERFLOW, GROUP = 1000, 1001, 1879048192, 65534, 2000
ON_HOST = Listener(uid=ROLE, in_user_namespace=False, overflow_uid=OVERFLOW)
IN_CONTAINER = Listener(uid=0, in_user_namespace=True, overflow_uid=OVERFLOW)


def peer(uid: int, *groups: int, pid: int = 42) -> Peer:
    return Peer(pid=pid, uid=uid, groups=frozenset(groups or {uid}))


@pytest.mark.parametrize(("who", "me", "policy", "admitted"), [
    (peer(ROLE), ON_HOST, PeerPolicy(), True),  # the role's own uid
    (peer(OWNER), ON_HOST, PeerPolicy(), False),  # anyone else ...
    (peer(OWNER), ON_HOST, PeerPolicy(uids=frozenset({OWNER})), True),  # ... unless listed
    (peer(OWNER, OWNER, GROUP), ON_HOST, PeerPolicy(group=GROUP), True),  # or in the group
    (peer(TOOL), ON_HOST, PeerPolicy(group=GROUP), False),  # a root brokerd's tool
    (peer(OVERFLOW), ON_HOST, PeerPolicy(), False),  # on the host 65534 is just a uid
    (peer(OVERFLOW, pid=0), IN_CONTAINER, PeerPolicy(), True),  # the appliance: dir is gate
    (peer(0, pid=0), IN_CONTAINER, PeerPolicy(), True),  # a sibling container of one podman
    (peer(5), IN_CONTAINER, PeerPolicy(), False),  # a mapped uid that is not the role's
])
def test_who_is_admitted(who, me, policy, admitted):
    refused = admit(who, me, policy)
    assert (refused is None) is admitted
    if refused is not None:
        assert f"uid {who.uid}" in refused


def test_a_peer_its_uid_admits_is_checked_without_reading_its_groups(monkeypatch):
    """``check_peer`` asks for the supplementary groups only when the uid and primary group do
    not admit the peer: every connection is checked, and inferproxy takes one per completion."""
    reads = []
    monkeypatch.setattr(peers, "supplementary_groups",
                        lambda sock: reads.append(sock) or frozenset())
    me = Listener(uid=os.geteuid(), in_user_namespace=False, overflow_uid=OVERFLOW)
    one, other = socket.socketpair()
    with one, other:
        _, refused = peers.check_peer(one, me, PeerPolicy(group=GROUP))
        assert refused is None and reads == []  # its uid is the listener's
        stranger = Listener(uid=ROLE, in_user_namespace=False, overflow_uid=OVERFLOW)
        _, refused = peers.check_peer(one, stranger, PeerPolicy(group=GROUP))
    assert refused is not None and reads == [one]  # neither uid nor primary group


# Connects to the socket argv[1] with the supplementary groups argv[2], then takes the groups
# argv[3] (as root it may), says so, and waits: by the time the listener accepts, the process's
# /proc/<pid>/status lists other groups than it connected with, as a process that took a
# refused peer's pid would.
CONNECT_THEN_CHANGE = """
import os, socket, sys
def gids(text): return [int(g) for g in text.split(",") if g]
os.setgroups(gids(sys.argv[2]))
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
os.setgroups(gids(sys.argv[3]))
print("changed", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a process's groups needs root")
@pytest.mark.parametrize(("at_connect", "later", "admitted"), [
    ((), (GROUP,), False),  # joined the group after connect(): /proc says member, it was not
    ((GROUP,), (), True),  # a member at connect() that left later is still the one who connected
    ((OWNER, GROUP + 1), (GROUP,), False),
    (tuple(range(GROUP - 200, GROUP + 1)), (), True),  # many groups, the socket's the last
])
def test_the_group_rule_reads_the_groups_the_peer_connected_with(
        tmp_path, at_connect, later, admitted):
    """A real process in another set of groups connects; the listener's check sees the
    supplementary groups the kernel captured at connect() (SO_PEERGROUPS), whatever the process
    (or another that took its pid) is in when /proc would be read."""
    path = str(tmp_path / "s.sock")
    me = Listener(uid=ROLE, in_user_namespace=False, overflow_uid=OVERFLOW)  # root is not ROLE
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        child = subprocess.Popen(
            [sys.executable, "-c", CONNECT_THEN_CHANGE, path, ",".join(map(str, at_connect)),
             ",".join(map(str, later))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline() == "changed\n"
            conn, _ = server.accept()
            with conn:
                peer, refused = peers.check_peer(conn, me, PeerPolicy(group=GROUP))
        finally:
            child.communicate("")
    assert (refused is None) is admitted, (peer, refused)
    assert peer.uid == 0 and peer.pid == child.pid
    assert peer.groups - {0} == set(at_connect) - {0}
