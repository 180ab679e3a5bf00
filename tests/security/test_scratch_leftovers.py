"""The attack 31j's E5: a brokerd killed during a call left that call's workspace in its scratch
directory, with the secrets injected into it, for good. Now the next brokerd on the same state
removes every workspace of its own before serving, and leaves another brokerd's alone. A real
``brokerd serve`` (bubblewrap, as root and unprivileged), SIGKILLed while a call runs."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .label_rig import LabelRig

pytestmark = pytest.mark.sandbox
WAIT = 600.0  # a guard, never a speed assumption


@pytest.fixture(params=["root", "unprivileged"])
def rig(request) -> Iterator[LabelRig]:
    top = Path(tempfile.mkdtemp(prefix="bx-leftover-"))
    try:
        yield LabelRig(top, unprivileged=request.param == "unprivileged")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def workspaces(rig: LabelRig) -> list[Path]:
    return sorted((rig.top / "scratch").glob("bx-call-*"))


def test_a_killed_brokerds_call_workspaces_are_removed_at_the_next_start(rig):
    work = rig.directory("work")
    rig.grant("shell", tools=["shell.run"], result_class="private", mounts=[(work, True)],
              argument=("cwd", str(work)))
    other = rig.top / "scratch" / "bx-call-0123456789abcdef-another"  # another brokerd's
    other.mkdir()
    rig.start()
    pending = rig.begin("s1", "shell.run", {"argv": ["sh", "-c", "touch started; sleep 600"],
                                             "cwd": str(work)})
    deadline = time.monotonic() + WAIT
    while not (work / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (work / "started").exists(), "the call never started"
    left = [path for path in workspaces(rig) if path != other]
    assert left, "the running call has no workspace: the example shows nothing"
    rig.kill(pending)
    assert all(path.exists() for path in left)  # what the kill leaves
    with rig:
        assert workspaces(rig) == [other]
    assert rig.brokerd("audit", "verify").returncode == 0
