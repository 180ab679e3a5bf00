"""The podman backend's seccomp profile is read from a directory only brokerd's uid can write:
the scratch root is /dev/shm by default, where any local user can make files, and a profile
planted under the right name would have been used as brokerd's (the second attack on issue 31:
with it, a tool could make a user namespace)."""

from __future__ import annotations

import json
import os

import pytest
from brokerd.sandbox._seccomp import oci_profile
from brokerd.sandbox.errors import SandboxUnavailable
from brokerd.sandbox.podman import _write_profile


def test_the_profile_is_brokerds_own_and_says_what_brokerd_means(tmp_path):
    path = _write_profile(tmp_path)
    assert path.parent == tmp_path / f"bx-profiles-{os.geteuid()}"
    assert json.loads(path.read_text()) == oci_profile()
    assert os.stat(path.parent).st_uid == os.geteuid() and not os.stat(path.parent).st_mode & 0o022
    assert _write_profile(tmp_path) == path  # written once, found again


@pytest.mark.parametrize("planted", ["writable by others", "a symlink", "owned by another uid"])
def test_a_directory_someone_else_could_write_is_refused(tmp_path, planted):
    place = tmp_path / f"bx-profiles-{os.geteuid()}"
    if planted == "writable by others":
        place.mkdir()
        place.chmod(0o777)
    elif planted == "a symlink":
        (tmp_path / "elsewhere").mkdir()
        place.symlink_to(tmp_path / "elsewhere")
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another uid needs root")
        place.mkdir(mode=0o755)
        os.chown(place, 4242, 4242)
    with pytest.raises(SandboxUnavailable, match="only brokerd's uid may write"):
        _write_profile(tmp_path)
