"""Who a role's socket admits (``bxcore.peers.admit``, pure): one row per rule."""

from __future__ import annotations

import pytest
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
