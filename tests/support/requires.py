"""What a test needs from the machine, in one place.

scripts/setup installs every program named here, and scripts/test runs setup first and then sets
``BOXMAKER_SETUP_DONE=1``. Under it, a missing program is a broken setup, so the test fails and
says so; a developer who runs pytest on a machine without setup sees a skip with the same reason.
Skips for other reasons (not root, no user namespaces) stay skips and are listed by ``-ra``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache

import pytest

# Programs scripts/setup installs (its APT_PACKAGES), or that ship with the machine it supports.
SETUP_INSTALLS = frozenset({
    "bwrap", "podman", "skopeo", "runc", "crun", "strace", "nix-instantiate", "systemd-creds",
    "systemd-analyze", "systemd-socket-activate", "unshare", "node", "npm", "ip",
})


def setup_done() -> bool:
    return os.environ.get("BOXMAKER_SETUP_DONE") == "1"


def missing(*programs: str) -> list[str]:
    return [program for program in programs if shutil.which(program) is None]


def require(*programs: str) -> None:
    """Skip the calling test or fixture when a program is absent; fail instead when
    scripts/setup ran and should have installed it."""
    absent = missing(*programs)
    if not absent:
        return
    unknown = sorted(set(absent) - SETUP_INSTALLS)
    if unknown:
        raise ValueError(f"require(): {unknown} are not programs scripts/setup installs; "
                         "add them to scripts/setup and SETUP_INSTALLS")
    reason = f"needs {', '.join(absent)} (scripts/setup installs it)"
    if setup_done():
        pytest.fail(f"{reason}, but setup ran and it is missing", pytrace=False)
    pytest.skip(reason)


def needs(*programs: str) -> pytest.MarkDecorator:
    """The mark form of ``require``: ``pytestmark = needs("podman")``, checked at set-up time by
    the ``needs`` hook in tests/conftest.py."""
    return pytest.mark.needs(*programs)


@cache
def user_namespaces() -> bool:
    """Whether this machine lets an unprivileged process make a user namespace."""
    require("unshare")
    return subprocess.run(["unshare", "--user", "true"], check=False).returncode == 0
