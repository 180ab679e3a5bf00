"""Issue 31: calls running at the same time that share a mount can signal each other there,
whatever either may write. A FIFO or a Unix socket in a read-only mount carries bytes; a lock
(flock, fcntl) or an inotify watch on a file there carries a bit. A real ``brokerd serve`` judges.

Hypothesis chooses the channel, which of the two calls may write the shared mount (neither, one,
both), whether each mounts the shared directory or the one below it where the rendezvous is,
and the sender's label (private or secret, trusted or not; its grant's result class, or egress).
The receiver is a fresh public session; the sender runs beside it (either may start first).

The property: whatever reached the receiver (the sender's canary, or the signal) comes back in
a result labelled at least the sender's label. And when the receiver reaches the network (an
egress grant for public data only), nothing above public reaches the host it may send to: the
sender does not start beside it.

    uv run --frozen pytest tests/security/test_concurrent_flow.py   (short: scripts/test)
    BOXMAKER_PROFILE=long ... (scripts/reliability): more examples, every configuration
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .flow_support import Answer, Brokerd, Label, canaries_in, grant_text
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

EXAMPLES = by_profile(short=4, long=60)
# The short profile runs bubblewrap only: podman shares mounts the same way, and one podman
# configuration costs about three minutes on a busy machine (docs/performance.md's test times).
CONFIGURATIONS = by_profile(short=["bubblewrap"],
                            long=["bubblewrap", "bubblewrap-unprivileged", "podman",
                                  "podman-remote"])
CHANNELS = ("fifo", "socket", "flock", "fcntl", "inotify")

# Each program loops until it has sent or received; until the test's stop-file appears in the
# rendezvous directory, which both calls mount (the test makes it once the receiver has answered,
# or the sender failed to run); a receiver, until a few seconds after the test's ended-file
# appears there (the sender's call is over: what it sent is there to read); or, if the channel
# never opens, until its patience ends (PATIENCE: time for the other call's sandbox to start, on
# a busy machine): then the example shows nothing, which the property allows.
PATIENCE = by_profile(short=15, long=60)  # the long profile starts podman sandboxes too
COMMON = f"""import os, sys, time, socket, fcntl, struct, select
stop, ended = os.path.join(point, 'stop'), os.path.join(point, 'ended')
patience = time.monotonic() + {PATIENCE}
def waiting():
    global patience
    if os.path.exists(ended):
        patience = min(patience, time.monotonic() + 3)
    return not os.path.exists(stop) and time.monotonic() < patience
"""
SEND = {
    "fifo": """
while waiting():
    try:
        fd = os.open(point + '/fifo', os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        time.sleep(0.05); continue
    os.write(fd, secret.encode()); os.close(fd); print('sent'); break
""",
    "socket": """
if listens:
    s = socket.socket(socket.AF_UNIX); s.bind(point + '/sock'); s.listen(1); s.settimeout(0.2)
    while waiting():
        try:
            c, _ = s.accept()
        except OSError:
            continue
        c.sendall(secret.encode()); c.close(); print('sent'); break
else:
    while waiting():
        try:
            c = socket.socket(socket.AF_UNIX); c.connect(point + '/sock')
        except OSError:
            time.sleep(0.05); continue
        c.sendall(secret.encode()); c.close(); print('sent'); break
""",
    "flock": """
fd = os.open(point + '/lock', os.O_RDONLY)
while waiting():
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB); break
    except OSError:
        time.sleep(0.05)
print('holding')
while waiting(): time.sleep(0.05)
""",
    "fcntl": """
fd = os.open(point + '/lock', os.O_RDONLY)
while waiting():
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB); break
    except OSError:
        time.sleep(0.05)
print('holding')
while waiting(): time.sleep(0.05)
""",
    "inotify": """
while waiting():
    open(point + '/watched').read(); time.sleep(0.05)
""",
}
RECEIVE = {
    "fifo": """
fd = os.open(point + '/fifo', os.O_RDONLY | os.O_NONBLOCK)
got = b''
while waiting() and not got:
    select.select([fd], [], [], 0.2)
    try:
        got = os.read(fd, 4096)
    except BlockingIOError:
        pass
print('GOT', got.decode(errors='replace'))
""",
    "socket": """
got = b''
if listens:
    s = socket.socket(socket.AF_UNIX); s.bind(point + '/sock'); s.listen(1); s.settimeout(0.2)
    while waiting() and not got:
        try:
            c, _ = s.accept()
        except OSError:
            continue
        got = c.recv(4096)
else:
    while waiting() and not got:
        try:
            c = socket.socket(socket.AF_UNIX); c.connect(point + '/sock'); got = c.recv(4096)
        except OSError:
            time.sleep(0.05)
print('GOT', got.decode(errors='replace'))
""",
    "flock": """
fd = os.open(point + '/lock', os.O_RDONLY)
while waiting():
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        print('SIGNAL'); break
    time.sleep(0.05)
""",
    "fcntl": """
fd = os.open(point + '/lock', os.O_RDONLY)
probe = struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0) + bytes(4)
while waiting():
    if struct.unpack('hhqqi', fcntl.fcntl(fd, fcntl.F_GETLK, probe)[:28])[0] != fcntl.F_UNLCK:
        print('SIGNAL'); break
    time.sleep(0.05)
""",
    "inotify": """
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0 and libc.inotify_add_watch(fd, (point + '/watched').encode(), 0x20) >= 0
except Exception as e:
    print('NO-CHANNEL', e); sys.exit(0)
while waiting():
    if select.select([fd], [], [], 0.2)[0]:
        print('SIGNAL'); break
""",
}
@dataclass(frozen=True)
class Case:
    channel: str
    sender_writes: bool
    receiver_writes: bool
    sender_mounts_below: bool  # the sender mounts the rendezvous directory, not its parent
    receiver_mounts_below: bool
    sender: Label  # untrusted: the sender's grant has hosts
    receiver_egress: bool  # the receiver may send what it holds to a host (public only)


cases = st.builds(
    Case, st.sampled_from(CHANNELS), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
    st.builds(Label, st.sampled_from(["private", "secret"]), st.booleans()), st.booleans())


class Sink(http.server.BaseHTTPRequestHandler):
    got: list[str] = []

    def do_POST(self) -> None:
        Sink.got.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def sink() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Sink.got = []
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()


class Rig:
    def __init__(self, brokerd: Brokerd, root: Path, tool_uid: int, sink: str):
        self.brokerd, self.root, self.tool_uid, self.sink = brokerd, root, tool_uid, sink
        self.serial = 0

    def directory(self, path: Path) -> Path:
        path.mkdir(parents=True)
        if os.geteuid() == 0:
            os.chown(path, self.tool_uid, self.tool_uid)
        return path

    def grant(self, name: str, result_class: str, key: Path, mounts: list[tuple[Path, bool]],
              hosts: list[str], public_only: bool = False) -> None:
        text = grant_text(["shell.run"], result_class, argument="cwd",
                          allowed=f"paths = [{json.dumps(str(key))}]",
                          mounts=[(key, False), *mounts],
                          extra=f"hosts = {json.dumps(hosts)}\n" if hosts else "")
        if public_only:
            text = text.replace('classes = ["public", "private", "secret"]', 'classes = ["public"]')
        (self.brokerd.grants / f"{name}.toml").write_text(text)

    def run(self, case: Case) -> tuple[Answer, Answer, str]:
        self.serial += 1
        top = self.directory(self.root / f"c{self.serial}")
        shared, vault = self.directory(top / "shared"), self.directory(top / "vault")
        point = self.directory(shared / "below")
        key_s, key_r = self.directory(top / "ks"), self.directory(top / "kr")
        secret = f"CANARY-{case.sender.data_class}-" \
                 f"{'untrusted' if case.sender.untrusted else 'trusted'}-{self.serial}"
        (vault / "s.txt").write_text(secret)
        os.mkfifo(point / "fifo")
        (point / "lock").write_text("x")
        (point / "watched").write_text("x")
        for name in ("fifo", "lock", "watched"):
            os.chmod(point / name, 0o666)
        listens = case.receiver_writes  # else the sender listens, when it may write
        channel = case.channel
        if channel == "socket" and not (case.receiver_writes or case.sender_writes):
            channel = "fifo"  # nobody can make a socket there: the owner's FIFO is the channel
        receiver_below, sender_below = case.receiver_mounts_below, case.sender_mounts_below
        # brokerd refuses a grant whose mount lies inside another grant's writable mount (a
        # symlink there could re-target it): below a writable parent, both mount the parent.
        if (case.sender_writes and not sender_below) or \
                (case.receiver_writes and not receiver_below):
            receiver_below = sender_below = False
        receiver_mount = point if receiver_below else shared
        sender_mount = point if sender_below else shared
        self.grant(f"r{self.serial}", "public", key_r, [(receiver_mount, case.receiver_writes)],
                   [self.sink] if case.receiver_egress else [], public_only=case.receiver_egress)
        self.grant(f"s{self.serial}", case.sender.data_class, key_s,
                   [(sender_mount, case.sender_writes), (vault, False)],
                   ["example.org"] if case.sender.untrusted else [])
        binds = (f"point = {str(point)!r}\n"
                 f"listens = {listens}\nsecret = open({str(vault / 's.txt')!r}).read()\n")
        post = ("\nimport urllib.request\ntry:\n    urllib.request.urlopen(urllib.request."
                f"Request('http://{self.sink}/', data=repr(globals().get('got', b'')).encode()),"
                " timeout=30)\nexcept Exception as e:\n    print('post failed', e)\n")
        receiver_code = (f"point = {str(point)!r}\nlistens = {listens}\n"
                         + COMMON + RECEIVE[channel] + (post if case.receiver_egress else ""))
        out: dict[str, Answer] = {}

        def call(name: str, session: str, key: Path, code: str) -> None:
            out[name] = self.brokerd.call(session, 1, "shell.run",
                                          {"argv": ["python3", "-c", code], "cwd": str(key)})
            if name == "r" or out[name].status != "ok":  # the other's loop ends now
                (point / "stop").touch()
            (point / "ended").touch()

        reader = threading.Thread(target=call, args=("r", f"fresh{self.serial}", key_r,
                                                     receiver_code))
        reader.start()
        call("s", f"sender{self.serial}", key_s, binds + COMMON + SEND[channel])
        reader.join()
        return out["r"], out["s"], secret


@pytest.fixture
def rig(request, sink) -> Iterator[Rig]:
    with serving_brokerd(request, request.param, "bx-chan-") as (brokerd, root, tool_uid):
        yield Rig(brokerd, root, tool_uid, sink)


@pytest.mark.parametrize("rig", CONFIGURATIONS, indirect=True)
def test_what_reaches_a_call_through_a_shared_mount_is_in_its_label(rig: Rig):
    reached = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(case=cases)
    def one(case: Case) -> None:
        received, sent, secret = rig.run(case)
        got = secret in received.content or "SIGNAL" in received.content
        if got:
            reached.append(case.channel)
            assert received.label.covers(Label(*_label_of(secret))), (case, received, sent)
        for posted in Sink.got:
            for _, label in canaries_in(posted):
                assert label.data_class == "public", (case, posted)
        if case.receiver_egress:  # the two do not run side by side: one of them is refused
            refused = [a for a in (received, sent) if "Nothing ran" in a.content]
            assert not got and refused, (case, received, sent)

    one()
    # Not vacuous: the channels do carry something between two sandboxes.
    assert reached or EXAMPLES < 4, "no example got anything across: the test shows nothing"


def _label_of(canary: str) -> tuple[str, bool]:
    _, label = canaries_in(canary)[0]
    return label.data_class, label.untrusted

