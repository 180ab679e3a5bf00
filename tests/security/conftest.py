"""The configurations every sandbox attack runs against (``calls``), and a directory the tool
is granted, owned as the tool's uid needs it and readable by every configuration."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerd.sandbox import BubblewrapSandbox, PodmanSandbox, PodmanSetup
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from faults.conftest import short_dir  # noqa: F401  (the real daemons' short socket paths)
from sandbox.conftest import (  # noqa: F401  (session fixtures shared with tests/sandbox)
    CONTAINERS_CONF,
    IMAGE_NAME,
    RESOLVER,
    TOOLKIT_DIR,
    podman_service,
    podman_store,
    toolkit_digest,
    web_server,
)

from .calls import AsUnprivilegedUser, InProcess

CONFIGURATIONS = ["bubblewrap", "bubblewrap-unprivileged", "podman", "podman-remote"]


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bx-h17-scratch-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# Each is a real sandbox: marked so, every test that takes ``caller`` is one the runs that leave
# out sandboxes (tests/left-out.json: make gate, the flake check, scripts/test --fast) leave out.
@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.sandbox) for name in CONFIGURATIONS])
def caller(request, scratch):
    """A way to make one call: brokerd as root (bubblewrap, rootful podman and its service)
    and as an unprivileged user (bubblewrap)."""
    if request.param.startswith("bubblewrap") and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (scripts/setup installs it)")
    if request.param == "bubblewrap":
        return InProcess(BubblewrapSandbox(toolkit_dir=TOOLKIT_DIR, scratch_root=scratch,
                                           egress_resolver=RESOLVER), _tool_uid())
    if request.param == "bubblewrap-unprivileged":
        if os.geteuid() != 0:
            pytest.skip("the tests run unprivileged already: the bubblewrap case is that one")
        return AsUnprivilegedUser(RESOLVER)
    digest = request.getfixturevalue("toolkit_digest")
    if request.param == "podman-remote":
        setup = PodmanSetup(image=f"{IMAGE_NAME}@{digest}", containers_conf=None,
                            remote=request.getfixturevalue("podman_service"))
    else:
        setup = PodmanSetup(image=f"{IMAGE_NAME}@{digest}", containers_conf=CONTAINERS_CONF,
                            storage=request.getfixturevalue("podman_store"))
    backend = PodmanSandbox(setup, scratch_root=scratch, egress_resolver=RESOLVER)
    return InProcess(backend, os.geteuid() if backend.rootless else DEFAULT_SANDBOX_UID)


def _tool_uid() -> int:
    return DEFAULT_SANDBOX_UID if os.geteuid() == 0 else os.geteuid()


@pytest.fixture
def granted(caller) -> Iterator[Path]:
    """A directory the call is granted (writable), owned by the tool's host uid, in a
    directory every uid may pass (pytest's own tmp_path is 0700)."""
    top = Path(tempfile.mkdtemp(prefix="bx-h17-sec-"))
    os.chmod(top, 0o755)
    path = top / "granted"
    path.mkdir()
    if os.geteuid() == 0:
        os.chown(path, caller.uid, caller.uid)
    yield path
    shutil.rmtree(top, ignore_errors=True)
