"""Issue 31, attack 31j's E2/E15: a sandbox that outlives its call. bwrap ties its sandbox to its
own life (``--die-with-parent``) only once the sandbox is set up; a deadline or a stopping
brokerd that killed bwrap before then left the sandbox running, uncounted, writing into mounts
whose labels no longer knew of it (a later secret write was laundered into a public tree).

Won every time here: brokerd's ``bwrap`` is a wrapper on its PATH that starts the real one in a
session of its own the moment brokerd's deadline has killed the wrapper, so brokerd's kill
cannot reach it and it is set up after the call is over, however busy the machine. The property:
nothing runs in it (the toolkit finds the call's lifeline closed first), so the tool writes
nothing; the call is answered as timed out, and the log verifies (``serving_brokerd``). A real
``brokerd serve``, as root and unprivileged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxctl.stack.processes import alive

from .flow_support import grant_text
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox
WAIT = 600.0  # a guard for the late sandbox to end, never a speed assumption

# In place of bwrap: the wrapper waits to be killed by the call's deadline; a starter in a
# session of its own waits for that death (a pidfd) and then runs the real bwrap; anything
# else runs at once.
WRAPPER = """#!/bin/sh
case " $* " in *" --seccomp "*) ;; *) exec {real} "$@" ;; esac
exec 3<&0
setsid python3 -c '
import os, select, sys
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
select.select([os.pidfd_open(int(sys.argv[2]))], [], [])
os.execv(sys.argv[3], [sys.argv[3], *sys.argv[4:]])
' {late} $$ {real} "$@" <&3 &
exec sleep 600
"""


# In place of bwrap, for the order of the end: a watcher in a session of its own waits for this
# process's death (a pidfd) and writes down whether the call's lifeline was closed by then.
WATCHER = """#!/bin/sh
case " $* " in *" --seccomp "*) ;; *) exec {real} "$@" ;; esac
for a in "$@"; do case $a in --lifeline=*) fd=${{a#--lifeline=}} ;; esac; done
setsid python3 -c '
import os, select, sys
pidfd = os.pidfd_open(int(sys.argv[1]))
select.select([pidfd], [], [])
ended = select.select([int(sys.argv[2])], [], [], 0)[0]
open(sys.argv[3] + ".tmp", "w").write("closed" if ended else "open")
os.rename(sys.argv[3] + ".tmp", sys.argv[3])
' $$ "$fd" {late} &
exec sleep 600
"""


CONFIGURATIONS = ["bubblewrap", "bubblewrap-unprivileged"]


def with_wrapper(wrapper: str) -> pytest.MarkDecorator:
    """The test's brokerd, in each configuration, with ``wrapper`` in place of bwrap."""
    return pytest.mark.parametrize("served", [(c, wrapper) for c in CONFIGURATIONS],
                                   indirect=True, ids=CONFIGURATIONS)


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[object, Path, int, Path]]:
    """A real brokerd, as ``request.param`` = (configuration, wrapper) says, and the file
    its wrapper writes."""
    configuration, wrapper = request.param
    wrappers = Path(tempfile.mkdtemp(prefix="bx-late-bin-"))
    served_in: list[Path] = []
    try:
        os.chmod(wrappers, 0o777)
        late = wrappers / "late"
        real = shutil.which("bwrap") or "/usr/bin/bwrap"
        (wrappers / "bwrap").write_text(wrapper.format(real=real, late=late))
        os.chmod(wrappers / "bwrap", 0o755)
        env = {"PATH": f"{wrappers}:/usr/bin:/bin"}
        with serving_brokerd(request, configuration, "bx-late-", more_env=env) as (
                brokerd, root, tool_uid):
            served_in.append(root)
            yield brokerd, root, tool_uid, late
    finally:
        for root in served_in:  # brokerd has stopped: whatever names its directory is left over
            kill_left_behind(root)
        shutil.rmtree(wrappers, ignore_errors=True)


def kill_left_behind(root: Path) -> None:
    """The late bwrap's sandbox PID 1 may wait for ever for the uid map its killed parent
    never writes (unprivileged; docs/threat-model.md says so): nothing runs in it, and the test
    does not leave it behind."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if str(root).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGKILL)


def timed_out_call(brokerd, root: Path, tool_uid: int) -> Path:
    """One shell.run call with a 0.5 s deadline, answered as timed out; its directory."""
    work = root / "work"
    work.mkdir()
    if os.geteuid() == 0:
        os.chown(work, tool_uid, tool_uid)
    (brokerd.grants / "shell.toml").write_text(grant_text(
        ["shell.run"], "public", argument="cwd", allowed=f'paths = ["{work}"]',
        mounts=[(work, True)]).replace("timeout_s = 900", "timeout_s = 0.5"))
    answer = brokerd.call("s1", 1, "shell.run", {"argv": ["touch", "ran"], "cwd": str(work)})
    assert answer.status == "failed" and "time" in answer.content, answer
    return work


def written(path: Path) -> str:
    deadline = time.monotonic() + WAIT
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text()


@with_wrapper(WATCHER)
def test_the_lifeline_is_closed_before_bwrap_is_killed(served):
    """A sandbox that found the lifeline open is tied to a bwrap still alive: so it must be
    closed before the kill (attack 31k, K7: closed once the killed bwrap was reaped, a busy
    brokerd let a sandbox set up in between run the tool)."""
    brokerd, root, tool_uid, watched = served
    timed_out_call(brokerd, root, tool_uid)
    assert written(watched) == "closed"


@with_wrapper(WRAPPER)
def test_a_sandbox_set_up_after_its_call_ended_runs_nothing(served):
    brokerd, root, tool_uid, late = served
    work = timed_out_call(brokerd, root, tool_uid)
    deadline = time.monotonic() + WAIT
    pid = int(written(late))
    # ended: a zombie counts (it waits for init, whose reaper may run seconds later)
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the late sandbox never ended"
    assert not (work / "ran").exists(), "a sandbox set up after its call ended ran the tool"
