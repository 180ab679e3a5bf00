"""No descriptor crosses from one sandbox to another.

Two calls run at once and share a mount; the first binds a Unix socket there and sends the second
a descriptor of its own: its writable tree, a file there opened for writing or reading, or the
socket. Had it arrived, the second call could write what its grant does not let it write (with
no write period: a grant or job file rewritten after the owner read it), read a tree a secret
session writes later with its own public label, and keep either past the first call's end
(attack 31l, F1, F4, F5). Property, judged by a real ``brokerd serve`` and real bubblewrap
sandboxes (brokerd as root and unprivileged): the receiver never holds a descriptor it was
sent, and a secret written into the sender's tree afterwards never reaches the receiver's
result unless that result is labelled secret.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .label_rig import LabelRig

pytestmark = pytest.mark.sandbox
SECRET = "CANARY-passed-descriptor-51c2"
EXAMPLES = 6

# What the sender opens and sends (Python in its sandbox; ``W`` its writable tree).
HANDED = {
    "its writable tree": "os.open(W, os.O_RDONLY | os.O_DIRECTORY)",
    "a file there, for writing": "os.open(W + '/f.txt', os.O_RDWR | os.O_CREAT, 0o644)",
    "a file there, for reading": "os.open(W + '/f.txt', os.O_RDONLY | os.O_CREAT, 0o644)",
    "the socket itself": "s.fileno()",
}
SENDER = """
import array, os, socket
W, R = {work!r}, {meeting!r}
s = socket.socket(socket.AF_UNIX)
s.bind(R + '/s.sock')
s.listen(1)
c, _ = s.accept()
c.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [{handed}]))])
c.recv(1)
"""
RECEIVER = """
import array, os, socket, time
W, R = {work!r}, {meeting!r}
while True:  # the socket's file exists from bind, and takes connections from listen
    try:
        c = socket.socket(socket.AF_UNIX)
        c.connect(R + '/s.sock')
        break
    except (FileNotFoundError, ConnectionRefusedError):
        c.close()
        time.sleep(0.02)
try:
    _, ancillary, _, _ = c.recvmsg(1, socket.CMSG_SPACE(4))
except OSError as exc:
    print('refused:', exc.errno)
    c.send(b'k')
    raise SystemExit(0)
fd = array.array('i', ancillary[0][2][:4])[0] if ancillary else None
print('got a descriptor' if fd is not None else 'no descriptor')
c.send(b'k')
while fd is not None and not os.path.exists(R + '/go'):
    time.sleep(0.02)
for name in ('x.txt', 'f.txt'):
    try:
        print('read:', os.read(os.open(name, os.O_RDONLY, dir_fd=fd), 200).decode())
    except (OSError, TypeError):
        pass
"""


@pytest.fixture(params=["root", "unprivileged"])
def rig(request: pytest.FixtureRequest) -> Iterator[LabelRig]:
    if os.geteuid() != 0:
        pytest.skip("brokerd as root, and as another uid, need root")
    top = Path(tempfile.mkdtemp(prefix="bx-no-descriptor-"))
    try:
        with LabelRig(top, unprivileged=request.param == "unprivileged") as started:
            yield started
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_descriptor_sent_from_one_sandbox_never_arrives_in_another(rig: LabelRig):
    numbers = itertools.count(1)
    secret = rig.directory("secret")
    (secret / "s.txt").write_text(SECRET)
    rig.grant("secret-read", tools=["fs.read"], result_class="secret", mounts=[(secret, False)],
              argument=("path", f"{secret}/**"))

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(handed=st.sampled_from(sorted(HANDED)), receiver_writes=st.booleans())
    def one(handed: str, receiver_writes: bool) -> None:
        n = next(numbers)
        work, meeting, own = (rig.directory(f"{name}{n}") for name in ("w", "meet", "own"))
        # Grants are written while no call runs: an owner's edit during one is refused.
        rig.grant(f"sender{n}", tools=["shell.run"], result_class="public",
                  mounts=[(work, True), (meeting, True)], argument=("cwd", f"{meeting}/**"))
        rig.grant(f"receiver{n}", tools=["shell.run"], result_class="public",
                  mounts=[(own, receiver_writes), (meeting, False)],
                  argument=("cwd", f"{own}/**"))
        rig.grant(f"secret-writer{n}", tools=["shell.run"], result_class="secret",
                  mounts=[(work, True)], argument=("cwd", f"{work}/**"))
        receiver = rig.begin(f"fresh-{n}", "shell.run", {"argv": [
            "python3", "-c", RECEIVER.format(work=str(work), meeting=str(meeting))],
            "cwd": str(own)})
        sent = rig.call(f"sender-{n}", "shell.run", {"argv": [
            "python3", "-c", SENDER.format(work=str(work), meeting=str(meeting),
                                           handed=HANDED[handed])], "cwd": str(meeting)})
        assert sent.status in ("ok", "failed"), sent
        assert rig.call(f"sec-{n}", "fs.read", {"path": str(secret / "s.txt")}).status == "ok"
        assert rig.shell(f"sec-{n}", f"printf %s {SECRET} > x.txt", work).status == "ok"
        (meeting / "go").touch()
        answer = rig.end(receiver)
        assert "got a descriptor" not in answer.content, (handed, answer)
        assert "refused:" in answer.content, (handed, answer)
        assert SECRET not in answer.content or answer.data_class == "secret", (handed, answer)

    one()


# A descriptor sent into a socket nothing reads stays open until the kernel's collector frees
# it, after every process of the sandbox is gone: a FIFO's data, a lock, a socket, held into a
# later call (attack 31n, F1). The sandbox may not put one in flight.
IN_FLIGHT = {
    "a FIFO holding data": "os.mkfifo(W + '/p'); f = os.open(W + '/p', os.O_RDWR); "
                           "os.write(f, b'secret')",
    "a locked file": "import fcntl; f = os.open(W + '/l', os.O_RDWR | os.O_CREAT, 0o644); "
                     "fcntl.flock(f, fcntl.LOCK_EX)",
    "a socket": "f = socket.socket(socket.AF_UNIX).fileno()",
}
CYCLE = """
import array, os, socket
W = {work!r}
{opened}
a, b = socket.socketpair()
try:
    {send}
    print('in flight')
except OSError as exc:
    print('refused:', exc.errno)
"""
SENDS = {"sendmsg": "a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, "
                    "array.array('i', [f, a.fileno(), b.fileno()]))])",
         "send_fds": "socket.send_fds(a, [b'x'], [f, a.fileno(), b.fileno()])"}


def test_no_descriptor_is_put_in_flight(rig: LabelRig):
    numbers = itertools.count(1)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(opened=st.sampled_from(sorted(IN_FLIGHT)), send=st.sampled_from(sorted(SENDS)))
    def one(opened: str, send: str) -> None:
        work = rig.directory(f"cycle{next(numbers)}")
        rig.grant(f"cycle-{work.name}", tools=["shell.run"], result_class="public",
                  mounts=[(work, True)], argument=("cwd", f"{work}/**"))
        answer = rig.call("s", "shell.run", {"argv": ["python3", "-c", CYCLE.format(
            work=str(work), opened=IN_FLIGHT[opened], send=SENDS[send])], "cwd": str(work)})
        assert "refused:" in answer.content and "in flight" not in answer.content, answer

    one()
