"""A call ends only when every process of its sandbox is gone.

brokerd counts a call as running (its write period: grant and job files changed then are a
tool's; the running calls' labels a new call is settled against) until its sandbox is gone.
Reaping the process brokerd started did not say so: bwrap's monitor exits once the tool's first
process has reported, and a killed sandbox dies after its bwrap. A process in an uninterruptible
system call finishes it first: here a truncate of a file of thousands of fragments, which holds
the file for a second or more, and changes its ctime when it completes (attack 31m, F2/F4/F6: a
tool's text in a grant file after the period's end; a lock held into a later public call).

Property, judged by a real ``brokerd serve`` and real sandboxes (bubblewrap with brokerd as root
and unprivileged; in the long profile a local rootful podman, and one through a podman service):
however the call ends (the tool exits, its deadline, its output past the cap) and whichever of
its processes stalls, when the answer arrives no process of the sandbox's PID namespace is left,
and every change those processes made falls inside a write period brokerd recorded; and a
brokerd killed while one stalls closes the write period it left open, at its next start, only
after that process is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerd.writeperiods import parse_periods
from faults.profile import by_profile, long_only
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import CONTAINERS_CONF, IMAGE_NAME
from .label_rig import LabelRig
from .test_flow_property import storage_conf

pytestmark = pytest.mark.sandbox
WAIT = 600.0  # a guard for the stall to finish, never a speed assumption
TIMEOUT_S = 6  # the grant's deadline, for the case that waits for it: past the stall's start

# In the tool's writable tree W: a process (a child of the tool, or of a daemon it left) fills a
# file with FRAGMENTS fragments and truncates it; the tool waits until the kernel reports it in
# uninterruptible sleep (D), or the truncate is over, and then ends as ENDING says.
TOOL = """
import os, sys, time
W, FRAGMENTS, ENDING, DAEMON = {work!r}, {fragments}, {ending!r}, {daemon}
open(W + '/ns', 'w').write(str(os.stat('/proc/self/ns/pid').st_ino))
def stall():
    fd = os.open(W + '/stall', os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for i in range(FRAGMENTS):
            os.posix_fallocate(fd, i * 8192, 4096)
    finally:
        open(W + '/filled', 'w').close()
    os.ftruncate(fd, 0)
    open(W + '/truncated', 'w').close()
staller = os.fork()
if staller == 0:
    if DAEMON and os.fork():
        os._exit(0)
    os.setsid()
    stall()
    os._exit(0)
while not os.path.exists(W + '/filled'):
    time.sleep(0.001)
state = ''
while state != 'D' and not os.path.exists(W + '/truncated'):
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            stat = open('/proc/' + pid + '/stat').read()
        except OSError:
            continue
        if stat.rsplit(')', 1)[1].split()[0] == 'D':
            state = 'D'
open(W + '/waiting', 'w').close()
if ENDING == 'exit':
    os._exit(0)
if ENDING == 'overflow':
    while True:
        sys.stdout.write('x' * 65536)
time.sleep({wait})
"""
ENDINGS = ("exit", "deadline", "overflow")


def processes_in(namespace: int) -> list[int]:
    """The host pids of every live process whose PID namespace is ``namespace`` (an inode):
    not a zombie (its PID 1 may be one, not yet reaped: it holds nothing and runs nothing)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/pid").st_ino != namespace:
                continue
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(pid))
    return found


PODMAN = pytest.param("podman", marks=long_only("a rootful podman call takes seconds each"))
# The appliance's way: brokerd sees none of the service's pids, and asks it.
PODMAN_SERVICE = pytest.param("podman-service", marks=long_only("as podman, through a service"))


@pytest.fixture(params=["root", "unprivileged", PODMAN, PODMAN_SERVICE])
def rig(request: pytest.FixtureRequest) -> Iterator[LabelRig]:
    if os.geteuid() != 0:
        pytest.skip("brokerd as root, and as another uid, need root (to see every process)")
    backend, env = "", {}
    if request.param.startswith("podman"):
        image = f"{IMAGE_NAME}@{request.getfixturevalue('toolkit_digest')}"
        backend = f'backend = "podman"\npodman_image = "{image}"\n'
    if request.param == "podman":
        backend += f'containers_conf = "{CONTAINERS_CONF}"\n'
        env = {"CONTAINERS_STORAGE_CONF": str(storage_conf(request.getfixturevalue(
            "podman_store")))}
    if request.param == "podman-service":
        backend += f'podman_remote = "{request.getfixturevalue("podman_service")}"\n'
    top = Path(tempfile.mkdtemp(prefix="bx-sandbox-gone-"))
    try:
        with LabelRig(top, unprivileged=request.param == "unprivileged", backend=backend,
                      env=env) as started:
            yield started
    finally:
        shutil.rmtree(top, ignore_errors=True)


# How many fragments the stall truncates. Through a podman service, past podman's own wait
# for a killed container (5 s): a stall shorter than that is over before podman answers.
FRAGMENTS = {"podman-service": (200_000, 300_000)}


def test_no_process_of_a_sandbox_outlives_its_call(rig: LabelRig, request: pytest.FixtureRequest):
    low, high = FRAGMENTS.get(request.node.callspec.params["rig"], (6000, 12000))
    rig.grant("staller", tools=["shell.run"], result_class="public",
              mounts=[(rig.directory("work"), True)], argument=("cwd", f"{rig.top}/data/**"))
    grant = rig.top / "grants" / "staller.toml"
    grant.write_text(grant.read_text() + f"[sandbox.limits]\ntimeout_s = {TIMEOUT_S}\n"
                     "output_cap = 4096\n")
    numbers = iter(range(1, 1000))

    @settings(max_examples=by_profile(short=3, long=12), deadline=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(ending=st.sampled_from(ENDINGS), fragments=st.integers(low, high),
           daemon=st.booleans())
    def one(ending: str, fragments: int, daemon: bool) -> None:
        work = rig.directory(f"work/{next(numbers)}")
        script = TOOL.format(work=str(work), fragments=fragments, ending=ending,
                             daemon=daemon, wait=TIMEOUT_S * 10)
        answer = rig.call("s", "shell.run", {"argv": ["python3", "-c", script],
                                             "cwd": str(work)})
        left = processes_in(int((work / "ns").read_text()))
        assert not left, (f"{ending}: processes {left} of the call's sandbox outlived its "
                          f"answer ({answer.status}: {answer.content[:80]!r})")
        last = last_period(rig)
        assert last.end is not None, "no call runs: its write period is closed"
        if (work / "stall").exists():
            changed = os.stat(work / "stall").st_ctime_ns
            assert last.holds(changed), (f"{ending}: the stalled process changed the file at "
                                         f"{changed}, after the period {last.describe()}")

    one()


def last_period(rig: LabelRig):
    periods = (rig.home / "broker" / "write-periods").read_text()
    return parse_periods(periods, Path("write-periods"))[-1]


def test_a_restarted_brokerd_ends_the_killed_ones_period_after_its_sandbox(rig: LabelRig):
    rig.grant("staller", tools=["shell.run"], result_class="public",
              mounts=[(rig.directory("work"), True)], argument=("cwd", f"{rig.top}/data/**"))
    numbers = iter(range(1, 1000))

    @settings(max_examples=by_profile(short=1, long=4), deadline=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(fragments=st.integers(30000, 50000), daemon=st.booleans())
    def one(fragments: int, daemon: bool) -> None:
        work = rig.directory(f"work/{next(numbers)}")
        script = TOOL.format(work=str(work), fragments=fragments, ending="deadline",
                             daemon=daemon, wait=WAIT)
        pending = rig.begin("s", "shell.run", {"argv": ["python3", "-c", script],
                                                "cwd": str(work)})
        deadline = time.monotonic() + WAIT
        while not (work / "waiting").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (work / "waiting").exists(), "the tool never reached its stall"
        rig.kill(pending)
        rig.start()
        last = last_period(rig)
        assert last.end is not None, "the killed brokerd's period is closed at the next start"
        namespace = int((work / "ns").read_text())
        while processes_in(namespace) and time.monotonic() < deadline:
            time.sleep(0.01)  # the stalled process's last change is made by then
        changed = os.stat(work / "stall").st_ctime_ns
        assert last.holds(changed), (f"the killed brokerd's stalled process changed the file "
                                     f"at {changed}, after the period {last.describe()}")

    one()


# An unprivileged tool's sandbox: PID 1 (bwrap's init) runs as the tool's uid, so the tool may
# ptrace it. It makes PID 1 run prctl(PR_SET_PDEATHSIG, 0): bwrap's --die-with-parent no longer
# holds, and the tool outlives its deadline (attack 31n, F4). x86_64 registers.
CUT_LOOSE = r"""
import ctypes, os, sys, time
W = sys.argv[1]
open(W + '/ns', 'w').write(str(os.stat('/proc/self/ns/pid').st_ino))
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
NAMES = ('r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags '
         'rsp ss fs_base gs_base ds es fs gs').split()
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in NAMES]
def pt(request, data=None):
    if libc.ptrace(request, 1, None, data) == -1 and ctypes.get_errno():
        raise OSError(ctypes.get_errno(), 'ptrace %d' % request)
pt(16); os.waitpid(1, 0x40000000)                       # PTRACE_ATTACH
saved = Regs(); pt(12, ctypes.byref(saved))             # PTRACE_GETREGS
call = Regs.from_buffer_copy(saved)
call.rip, call.rax, call.rdi, call.rsi, call.orig_rax = saved.rip - 2, 157, 1, 0, 2**64 - 1
pt(13, ctypes.byref(call)); pt(9); os.waitpid(1, 0x40000000)  # SETREGS, SINGLESTEP: prctl
restore = Regs.from_buffer_copy(saved)
if ctypes.c_longlong(saved.rax).value in (-512, -513, -514, -516):
    restore.rip, restore.rax = saved.rip - 2, saved.orig_rax
pt(13, ctypes.byref(restore)); pt(17)                   # SETREGS, DETACH
open(W + '/cut', 'w').close()
while True:
    time.sleep(1)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64",
                    reason="the tool's ptrace uses x86_64 registers")
def test_a_tool_that_cuts_its_sandbox_loose_still_ends_with_its_call(rig: LabelRig):
    """However the tool changes its sandbox's PID 1, the call ends at its deadline with every
    process of the sandbox gone: brokerd kills PID 1 through its pidfd."""
    if rig.uid == os.geteuid():
        pytest.skip("as root the sandbox's PID 1 is not the tool's uid: ptrace is refused")
    work = rig.directory("cut")
    rig.grant("cutter", tools=["shell.run"], result_class="public", mounts=[(work, True)],
              argument=("cwd", f"{work}/**"))
    grant = rig.top / "grants" / "cutter.toml"
    grant.write_text(grant.read_text() + "[sandbox.limits]\ntimeout_s = 5\n")
    pending = rig.begin("s", "shell.run", {"argv": ["python3", "-c", CUT_LOOSE, str(work)],
                                           "cwd": str(work)})
    deadline = time.monotonic() + WAIT
    while pending.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pending.running(), "the call was never answered: its sandbox lives on"
    answer = rig.end(pending)
    assert (work / "cut").exists(), f"the tool did not cut PID 1 loose: {answer}"
    assert answer.status == "failed" and "time" in answer.content, answer
    assert not processes_in(int((work / "ns").read_text()))
