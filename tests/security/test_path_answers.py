"""Issue 31, the third attack's F1, F3 and F8: noninterference of brokerd's answers to a path
argument. brokerd resolves a file tool's ``path`` on the host before deciding; whatever that
resolution reads is part of the answer. A public receiver's answer must be the same whatever a
secret session did (a symlink it planted or not, a chain of 0-60 links, a process of its call
standing in or holding a file open in a directory), unless the answer is labelled secret.

Each example runs twice on a real ``brokerd serve`` (bubblewrap), in two worlds that differ only
in the secret sender's bit: the same layout under a fresh directory, the same grants (only that
world's), a fresh receiver. In both the sender writes its secret-labelled mount (so its label is
the same), and for bit 1 plants there a symlink, or a chain of links, to the public mount; a
call of its stands (cwd) in ``sec/x/y`` for bit 1, ``sec/x`` for bit 0, holding a file there
open, while the receiver probes (its mounts are not the receiver's: a call running on a zone
the receiver shares would label every answer secret: flow-between-running-calls.md).
Hypothesis chooses the receiver's grant (no argument constraint, a ``pattern``, ``paths``; its
mounts with or without the secret one), the owner's links in the public mount (into the secret
one, ``..``, a chain of 0-60 links) and the probes: fs.read, fs.list or fs.search on paths
through all of these, ``..``, ``/proc/<pid>/cwd`` and ``/proc/<pid>/fd/N`` of the sender's
process, ``/dev/fd``.

The property: for every probe, the two worlds' answers (status, content with the world's
directory and pid written alike, label) are equal, or both are labelled secret.
(docs/decisions/answers-read-beneath-mounts.md)

    uv run --frozen pytest tests/security/test_path_answers.py   (short: scripts/test)
    BOXMAKER_PROFILE=long ... (scripts/reliability): more examples, brokerd unprivileged too
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from faults.profile import by_profile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .flow_support import Answer, Brokerd, Label, grant_text
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

EXAMPLES = by_profile(short=2, long=40)
CONFIGURATIONS = ["bubblewrap"] + (["bubblewrap-unprivileged"] if by_profile(0, 1) else [])
SECRET = Label("secret")
STARTED_WAIT = 300.0  # a guard against a holder that never starts, not a speed limit
PROBES = ("{pub}/a", "{pub}/d", "{pub}/out/b", "{pub}/up/sec/b", "{pub}/../sec/b", "{sec}/b",
          "{pub}/c0", "{pub}/k0", "/proc/{pid}/cwd/../../../pub/a", "/proc/{pid}/cwd",
          "/proc/{pid}/fd/3",
          "{pub}/{to_root}/proc/{pid}/cwd/../../../pub/d", "/dev/fd/3", "{pub}/self/d")
TOOLS = ("fs.read", "fs.list", "fs.search")


@dataclass(frozen=True)
class Case:
    constraint: str  # the receiver's grant on ``path``: "none", "pattern" or "paths"
    sees_secret: bool  # the receiver's grant mounts the secret mount too (read-only)
    planted: str  # what bit 1 plants at sec/b: a link to "a" or to "d" in pub
    chain: int  # links in the sender's chain to it (0: sec/b is the link itself)
    owner_chain: int  # links of the owner's chain pub/c0 -> ... -> pub/a
    into_secret: int  # links of the owner's chain pub/k0 -> ... -> sec/b
    bit0_file: bool  # bit 0 leaves a regular file at sec/b (else nothing)
    probes: tuple[tuple[str, str], ...]  # (tool, template)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    return Case(
        constraint=draw(st.sampled_from(["none", "pattern", "paths"])),
        sees_secret=draw(st.booleans()),
        planted=draw(st.sampled_from(["a", "d"])),
        chain=draw(st.integers(0, 60)),
        owner_chain=draw(st.integers(0, 60)),
        into_secret=draw(st.integers(0, 60)),
        bit0_file=draw(st.booleans()),
        probes=tuple(draw(st.lists(st.tuples(st.sampled_from(TOOLS), st.sampled_from(PROBES)),
                                   min_size=1, max_size=6))),
    )


def chain(directory: Path, stem: str, links: int, end: str) -> list[tuple[str, str]]:
    """(target, link) of each link of ``stem``0 -> ``stem``1 -> ... -> ``end`` in
    ``directory``: ``links`` links in all (none for 0)."""
    names = [str(directory / f"{stem}{n}") for n in range(links)] + [end]
    return [(names[n + 1], names[n]) for n in range(links)]


def read_grant(tools: tuple[str, ...], mounts: list[Path], constraint: str | None) -> str:
    """A public auto grant for ``tools`` reading ``mounts``, with ``constraint`` on ``path``
    (a TOML line) or none; any session may use it."""
    listed = ", ".join(f"{{ path = {json.dumps(str(m))} }}" for m in mounts)
    return (f"tools = {json.dumps(list(tools))}\nmode = \"auto\"\n"
            'classes = ["public", "private", "secret"]\nallow_untrusted = true\n'
            'result_class = "public"\n'
            + (f"[arguments.path]\n{constraint}\n" if constraint else "")
            + f"[sandbox]\nmounts = [{listed}]\n")


class Rig:
    def __init__(self, brokerd: Brokerd, root: Path, tool_uid: int):
        self.brokerd, self.root, self.tool_uid = brokerd, root, tool_uid
        self.serial = self.calls = 0

    def directory(self, path: Path) -> Path:
        path.mkdir(parents=True)
        if os.geteuid() == 0:
            os.chown(path, self.tool_uid, self.tool_uid)
        return path

    def grant(self, name: str, tools: list[str], argument: str, allowed: str,
              mounts: list[tuple[Path, bool]], result_class: str) -> None:
        (self.brokerd.grants / f"{name}.toml").write_text(
            grant_text(tools, result_class, argument=argument, allowed=allowed, mounts=mounts))

    def world(self, case: Case, bit: bool) -> list[tuple[str, str, Label]]:
        """One world: the layout, the sender's bit, the receiver's probes; its answers with
        the world's directory and the holder's pid written as ``<top>`` and ``<pid>``."""
        self.serial += 1
        k = self.serial
        for old in self.brokerd.grants.glob("*.toml"):
            old.unlink()  # only this world's grants decide, so every reason names the same
        top = self.directory(self.root / f"w{k}")
        pub, sec, flag = (self.directory(top / name) for name in ("pub", "sec", "flag"))
        (pub / "a").write_text("public a\n")
        self.directory(pub / "d")
        (pub / "d" / "e").write_text("public e\n")
        os.symlink(sec, pub / "out")
        os.symlink("..", pub / "up")
        os.symlink(".", pub / "self")
        for target, link in (chain(pub, "c", case.owner_chain, str(pub / "a")) +
                             chain(pub, "k", case.into_secret, str(sec / "b"))):
            os.symlink(target, link)
        if case.owner_chain == 0:
            shutil.copy(pub / "a", pub / "c0")
        reads = [pub, sec] if case.sees_secret else [pub]
        constraint = {"none": None, "pattern": f"pattern = {json.dumps(f'{pub}/.*')}",
                      "paths": "paths = " + json.dumps([f"{p}/**" for p in reads])
                      }[case.constraint]
        (self.brokerd.grants / "rd.toml").write_text(read_grant(TOOLS, reads, constraint))
        self.grant("snd", ["shell.run"], "cwd", f"paths = {json.dumps([str(sec)])}",
                   [(sec, True), (flag, True)], "secret")
        sender = f"tx{k}"
        planted = "".join(f"os.symlink({target!r}, {link!r})\n" for target, link in
                          chain(sec, "l", case.chain, str(pub / case.planted)))
        first = str(sec / "l0") if case.chain else str(pub / case.planted)
        plant = (planted + f"os.symlink({first!r}, 'b')\n" if bit else
                 "open('b', 'w').write('regular')\n" if case.bit0_file else "")
        sent = self.call(sender, "shell.run", {
            "argv": ["python3", "-c", "import os\nos.makedirs('x/y')\nopen('x/y/f', 'w')\n"
                     "open('x/f', 'w')\n" + plant],
            "cwd": str(sec)})
        assert sent.status == "ok", sent
        # From sec/x/y, ../../.. is the world's directory; from sec/x it is above it
        stand = sec / "x" / "y" if bit else sec / "x"
        holder, pid = self.hold(sender, stand, flag, sec, f"holder-{k}")
        answers = []
        try:
            for tool, template in case.probes:
                path = template.format(pub=pub, sec=sec, pid=pid,
                                       to_root=os.path.relpath("/", pub))
                arguments = {"path": path, **({"pattern": "."} if tool == "fs.search" else {})}
                got = self.call(f"rx{k}", tool, arguments)
                answers.append(_written_alike(got, top, pid))
        finally:
            (flag / "go").touch()
            holder.join()
        return answers

    def hold(self, session: str, stand: Path, flag: Path, cwd: Path,
             tag: str) -> tuple[threading.Thread, int]:
        """A call of ``session`` whose process stands in ``stand`` holding its file ``f`` open
        (fd 3) until the test makes the go-file; returned once started, with its host pid."""
        code = (f"import os, time\n# {tag}\nos.chdir({str(stand)!r})\n"
                f"fd = os.open({str(stand / 'f')!r}, os.O_RDONLY)\nos.dup2(fd, 3)\n"
                f"open({str(flag / 'started')!r}, 'w').close()\n"
                f"while not os.path.exists({str(flag / 'go')!r}):\n    time.sleep(0.05)\n")
        thread = threading.Thread(target=lambda: self.call(
            session, "shell.run", {"argv": ["python3", "-c", code], "cwd": str(cwd)}))
        thread.start()
        deadline = time.monotonic() + STARTED_WAIT
        while not (flag / "started").exists():
            assert thread.is_alive() and time.monotonic() < deadline, self.brokerd.log()
            time.sleep(0.05)
        return thread, _pid_of(tag)

    def call(self, session: str, tool: str, arguments: dict[str, object]) -> Answer:
        self.calls += 1
        return self.brokerd.call(session, self.calls, tool, arguments)


def _pid_of(tag: str) -> int:
    """The host pid of the python3 process whose command line carries ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"python3", b"-c"] and len(argv) > 2 and \
                    argv[2].startswith(b"import os, time\n# " + tag.encode() + b"\n"):
                found.append(int(entry.name))
    assert found, f"no process carries {tag}"
    return max(found)


def _written_alike(answer: Answer, top: Path, pid: int) -> tuple[str, str, Label]:
    text = answer.content.replace(str(top), "<top>").replace(f"/proc/{pid}/", "/proc/<pid>/")
    return answer.status, text, answer.label


@pytest.fixture
def rig(request) -> Iterator[Rig]:
    with serving_brokerd(request, request.param, "bx-paths-") as (brokerd, root, tool_uid):
        yield Rig(brokerd, root, tool_uid)


@pytest.mark.parametrize("rig", CONFIGURATIONS, indirect=True)
def test_a_public_answer_to_a_path_is_the_same_whatever_a_secret_session_did(rig: Rig):
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(case=cases())
    @example(case=Case("none", False, "a", 0, 0, 41, False,  # F1, F3 and F8 at once
                       (("fs.read", "{sec}/b"), ("fs.read", "{pub}/k0"),
                        ("fs.read", "/proc/{pid}/cwd/../../../pub/a"), ("fs.list", "{pub}/c0"))))
    def one(case: Case) -> None:
        worlds = [rig.world(case, bit) for bit in (False, True)]
        for probe, (zero, one) in zip(case.probes, zip(*worlds, strict=True), strict=True):
            assert zero == one or (zero[2].covers(SECRET) and one[2].covers(SECRET)), \
                (probe, zero, one)

    one()
