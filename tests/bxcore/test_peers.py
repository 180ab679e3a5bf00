"""Who a role's socket admits (``bxcore.peers.admit``, pure): one row per rule."""

from __future__ import annotations

import os
import socket

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
    """``check_peer`` reads /proc/<pid>/status only when the uid and primary group do not
    admit the peer: every connection is checked, and inferproxy takes one per completion."""
    reads = []
    monkeypatch.setattr(peers, "_supplementary", lambda pid: reads.append(pid) or frozenset())
    me = Listener(uid=os.geteuid(), in_user_namespace=False, overflow_uid=OVERFLOW)
    one, other = socket.socketpair()
    with one, other:
        _, refused = peers.check_peer(one, me, PeerPolicy(group=GROUP))
        assert refused is None and reads == []  # its uid is the listener's
        stranger = Listener(uid=ROLE, in_user_namespace=False, overflow_uid=OVERFLOW)
        _, refused = peers.check_peer(one, stranger, PeerPolicy(group=GROUP))
    assert refused is not None and reads == [os.getpid()]  # neither uid nor primary group
