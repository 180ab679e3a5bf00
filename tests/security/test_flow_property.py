"""Issue 31: the whole information flow, as a property, against a real ``brokerd serve``.

Sessions of random class and trust, driven as a hostile model drives them through loopd (tool
requests on broker.sock), write, copy, hard-link, symlink, move and rename files and directories
(names that are not UTF-8 or 255 bytes long among them), and keep writing from a call that is
still running while others read, across the mounts of random grants (nested, overlapping,
writable or not, of random classes). Every byte written carries a canary naming the label of
where it came from: the writing session's taint at that moment (its name and content), or the
file it was copied, linked or moved from. The owner's grants are consistent: a grant's
``result_class`` is at least the class of every seeded file it can read.

The property, checked on every answer and after every stop of brokerd:

1. a result that contains a canary is classed at least the canary's class, and untrusted if
   the canary is (a canary the call itself sent, a path echoed back, does not count); every
   write is read back at once by a new, clean session, through fs.read or any shell grant;
2. every call brokerd allowed has its audited result record;
3. ``brokerd audit verify`` says ok;
4. brokerd stops on SIGTERM and starts again on its own state (a rule does that at random).

brokerd is a black box: only its socket, its audit log's JSON lines and its command line.
A failure prints hypothesis' minimal steps and the blob that replays them.

    uv run --frozen pytest tests/security/test_flow_property.py     (short: scripts/test)
    BOXMAKER_PROFILE=long ... (scripts/reliability): 10,000 steps per configuration (FLOW_STEPS)
    BOXMAKER_FLOW_SOURCES=<a tree>/packages ...      judges that tree's brokerd instead
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from faults.profile import by_profile, hang_guard
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from .calls import UNPRIVILEGED_UID
from .conftest import CONFIGURATIONS, CONTAINERS_CONF, IMAGE_NAME
from .flow_layout import Layout, Tree, decodes, layouts
from .flow_support import (
    COPY,
    LINK,
    MOVE,
    SHOW,
    SYMLINK,
    WRITE,
    WRITE_AND_WAIT,
    Answer,
    Brokerd,
    Canaries,
    Label,
    canaries_in,
    program,
)

pytestmark = pytest.mark.sandbox

SESSIONS = 4
# 14 steps leave room for a write, a copy or link, a rename of its parent and a read by another
# session in one example; the long profile's 50 for longer chains (CI time, issue 36).
STEPS = by_profile(short=14, long=50)
TOTAL_STEPS = int(os.environ.get("FLOW_STEPS", by_profile(short=0, long=10_000)))
EXAMPLES = by_profile(short=3, long=200)
# A podman service's calls cost about twice bubblewrap's: the short profile runs it for fewer
# examples of the same length (CI time, issue 36).
REMOTE_EXAMPLES = by_profile(short=2, long=200)
# The short profile leaves out rootful podman run by brokerd itself (33 s in CI): the
# appliance's podman is a service brokerd reaches (podman-remote), which stays.
FLOW_CONFIGURATIONS = by_profile(short=["bubblewrap", "bubblewrap-unprivileged", "podman-remote"],
                                 long=CONFIGURATIONS)
WAIT = 600.0  # a guard for the concurrent writer's file to appear: never a speed assumption


class FlowMachine(RuleBasedStateMachine):
    broker_section = ""  # set per configuration
    broker_env: dict[str, str] = {}  # set per configuration
    brokerd_uid: int | None = None  # None: brokerd runs as this process's user
    tool_uid = 0
    steps = 0

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="bx-flow-"))
        os.chmod(self.root, 0o755)
        self.canaries = Canaries()
        self.taint = {f"s{i}": Label() for i in range(SESSIONS)}
        self.numbers: dict[str, int] = {}
        self.answered: list[tuple[str, int, str, Answer]] = []
        self.brokerd: Brokerd | None = None
        self.tree: Tree | None = None
        self.violated = False  # a rule failed: teardown then only cleans up

    # --- setting up -------------------------------------------------------------------------

    @initialize(layout=layouts())
    def start(self, layout: Layout) -> None:
        self.tree = Tree(self.root / "t", layout, self.canaries, self.tool_uid)
        self.brokerd = Brokerd(self.root / "broker", self.broker_section, self.brokerd_uid,
                               self.broker_env)
        self.tree.write_grants(self.brokerd.grants)
        self.brokerd.start()

    def teardown(self) -> None:
        try:
            if self.brokerd is not None and self.brokerd.process is not None:
                self.brokerd.stop()
                if not self.violated:
                    self.check_record()
        finally:
            if self.tree is not None:
                self.tree.close()
            shutil.rmtree(self.root, ignore_errors=True)

    # --- one call, and the property on its answer -------------------------------------------

    def call(self, session: str, tool: str, arguments: dict[str, object]) -> Answer:
        assert self.brokerd is not None
        number = self.numbers[session] = self.numbers.get(session, 0) + 1
        before = self.taint[session]
        answer = self.brokerd.call(session, number, tool, arguments)
        self.answered.append((session, number, tool, answer))
        self.taint[session] = before.join(answer.label)
        # A canary the call itself sent (a path naming a file) may come back in a refusal or a
        # traceback: that is the session's own text, not a flow.
        sent = {canary for canary, _ in canaries_in(json.dumps(arguments))}
        for canary, label in canaries_in(answer.content):
            if canary not in sent and not answer.label.covers(label):
                self.violated = True
                raise AssertionError(
                    f"{tool} by {session} (call {number}, taint {before}) answered "
                    f"{answer.status}, {answer.label}, but its result holds {canary}: data "
                    f"labelled {label} reached a session labelled lower.\n"
                    f"arguments: {arguments!r}\n"
                    f"result: {answer.content[:2000]}")
        return answer

    def shell(self, session: str, grant: int, argv: list[str]) -> Answer:
        assert self.tree is not None
        return self.call(session, "shell.run", {"argv": argv, "cwd": str(self.tree.key(grant))})

    def check_record(self) -> None:
        """With brokerd stopped (every append flushed): each allowed call has its result
        record, and the chain verifies."""
        assert self.brokerd is not None
        records = self.brokerd.audit_records()
        allowed = {(r["decision"]["session"], r["decision"]["call"]) for r in records
                   if r["kind"] == "decision" and r["decision"]["verdict"] == "allow"}
        results = {(r["session"], r["call"]) for r in records if r["kind"] == "result"}
        for session, number, tool, answer in self.answered:
            if (session, number) in allowed:
                assert (session, number) in results, (
                    f"{tool} call {number} of {session} was allowed but has no audited "
                    f"result; brokerd answered {answer.status}: {answer.content[:500]}")
        ok, said = self.brokerd.verify()
        assert ok, f"brokerd audit verify:\n{said}"

    @invariant()
    def count(self) -> None:
        type(self).steps += 1

    # --- who does it ------------------------------------------------------------------------

    def session(self, data: st.DataObject, label: str = "session") -> str:
        return data.draw(st.sampled_from([f"s{i}" for i in range(SESSIONS)]), label=label)

    def grant(self, data: st.DataObject, *, writes: bool = False) -> int | None:
        """A shell grant (one that can write, if ``writes``); None when there is none."""
        assert self.tree is not None
        fitting = [number for number, shell in enumerate(self.tree.layout.shell)
                   if any(w for _, w in shell.mounts) or not writes]
        return data.draw(st.sampled_from(fitting), label="grant") if fitting else None

    def pick(self, data: st.DataObject, choices: list[bytes], label: str) -> bytes | None:
        return data.draw(st.sampled_from(choices), label=label) if choices else None

    # --- rules ------------------------------------------------------------------------------

    @rule(data=st.data())
    def read_a_source(self, data: st.DataObject) -> None:
        """A session takes a class by reading a seeded file, or untrust from a web page."""
        assert self.tree is not None
        session = self.session(data)
        if data.draw(st.booleans(), label="web page"):
            self.call(session, "http.fetch", {"url": self.tree.page_url})
            return
        seed = self.pick(data, self.tree.seeds(), "seed")
        if seed is not None:
            self.call(session, "fs.read", {"path": os.fsdecode(seed)})

    @rule(data=st.data(), kind=st.sampled_from(["plain", "not-utf-8", "long", "new-directory"]))
    def write(self, data: st.DataObject, kind: str) -> None:
        assert self.tree is not None
        session, grant = self.session(data), self.grant(data, writes=True)
        if grant is None:
            return
        parent = self.pick(data, self.tree.directories(grant, writable=True), "into")
        if parent is None:
            return
        canary = self.canaries.new(self.taint[session])
        target = self.tree.new_name(parent, self.canaries.new(self.taint[session]), kind)
        self.shell(session, grant, program(WRITE, dst=target, content=canary.encode() + b"\n"))
        self.read_back(data, target)

    @rule(data=st.data(), how=st.sampled_from(["copy", "hard link", "symlink", "move"]))
    def copy_link_or_move(self, data: st.DataObject, how: str) -> None:
        assert self.tree is not None
        session, grant = self.session(data), self.grant(data, writes=True)
        if grant is None:
            return
        same_mount = how == "hard link"  # link(2) never crosses a mount
        sources = self.tree.files(grant, writable=how in ("hard link", "move"))
        source = self.pick(data, sources, "from")
        if source is None:
            return
        into = self.tree.directories(grant, writable=True,
                                     mount_of=source if same_mount else None)
        parent = self.pick(data, into, "into")
        if parent is None:
            return
        kind = data.draw(st.sampled_from(["plain", "not-utf-8", "long"]), label="name")
        target = self.tree.new_name(parent, self.canaries.new(self.taint[session]), kind)
        body = {"copy": COPY, "hard link": LINK, "symlink": SYMLINK, "move": MOVE}[how]
        self.shell(session, grant, program(body, src=source, dst=target))
        self.read_back(data, target)

    @rule(data=st.data())
    def rename_a_directory(self, data: st.DataObject) -> None:
        """A directory (any depth: a parent of what was written, or its parent) gets a new name,
        in the same writable directory or another one the call can write."""
        assert self.tree is not None
        session, grant = self.session(data), self.grant(data, writes=True)
        if grant is None:
            return
        moving = self.pick(data, self.tree.directories(grant, writable=True, movable=True),
                           "directory")
        if moving is None:
            return
        into = [d for d in self.tree.directories(grant, writable=True)
                if d != moving and not d.startswith(moving + b"/")]
        parent = self.pick(data, into, "into")
        if parent is None:
            return
        target = self.tree.new_name(parent, "d-" + self.canaries.new(self.taint[session]),
                                    "plain")
        self.shell(session, grant, program(MOVE, src=moving, dst=target))
        self.read_back(data, target)

    def read_back(self, data: st.DataObject, written: bytes) -> None:
        """A new, clean session reads what was just written (a file under it, if it is a
        directory) through fs.read or through any shell grant that can see it."""
        assert self.tree is not None
        under = [f for f in self.tree.files(None) if f == written or f.startswith(written + b"/")]
        path = self.pick(data, under, "read back")
        if path is None:
            return  # the call did not write it (refused, failed)
        session = f"fresh{len(self.taint)}"
        self.taint[session] = Label()
        readers = [g for g in range(len(self.tree.layout.shell)) if path in self.tree.files(g)]
        if readers and data.draw(st.booleans(), label="read back by shell.run"):
            grant = data.draw(st.sampled_from(readers), label="reading grant")
            self.shell(session, grant, program(SHOW, paths=path))
        elif decodes(path):  # a JSON argument holds no name that is not UTF-8
            self.call(session, "fs.read", {"path": path.decode()})

    @rule(data=st.data(), how=st.sampled_from(["fs.read", "fs.list", "shell.run"]))
    def read(self, data: st.DataObject, how: str) -> None:
        assert self.tree is not None
        session = self.session(data)
        if how == "fs.list":
            where = self.pick(data, self.tree.directories(None), "directory")
            if where is not None:
                self.call(session, "fs.list", {"path": os.fsdecode(where)})
            return
        if how == "fs.read":
            path = self.pick(data, self.tree.files(None, utf8=True), "file")
            if path is not None:
                self.call(session, "fs.read", {"path": path.decode()})
            return
        grant = self.grant(data)
        files = self.tree.files(grant) if grant is not None else []
        chosen = data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=3,
                                    unique=True), label="files") if files else []
        if chosen:
            self.shell(session, grant, program(SHOW, paths=b"\0".join(chosen)))

    @rule(data=st.data())
    def read_while_a_writer_runs(self, data: st.DataObject) -> None:
        """A call writes a file and keeps running until the test says go; meanwhile another
        session reads it (through fs.read, or a shell.run of any grant that mounts it)."""
        assert self.tree is not None
        writer, grant = self.session(data, "writer"), self.grant(data, writes=True)
        reader = self.session(data, "reader")
        if grant is None:
            return
        parent = self.pick(data, self.tree.directories(grant, writable=True), "into")
        if parent is None:
            return
        canary = self.canaries.new(self.taint[writer])
        target = self.tree.new_name(parent, self.canaries.new(self.taint[writer]), "plain")
        go = parent + f"/go-{self.canaries.count}".encode()
        argv = program(WRITE_AND_WAIT, dst=target, content=canary.encode() + b"\n", go=go)
        finished: list[Answer | BaseException] = []

        def write() -> None:
            try:
                finished.append(self.shell(writer, grant, argv))
            except BaseException as failure:  # raised again below, in the test's thread
                finished.append(failure)

        running = threading.Thread(target=write)
        running.start()
        try:
            deadline = time.monotonic() + WAIT
            while not self.tree.holds(target, canary) and running.is_alive():
                assert time.monotonic() < deadline, "the writer never wrote its file"
                time.sleep(0.02)
            if self.tree.holds(target, canary):
                readers = [g for g in range(len(self.tree.layout.shell))
                           if target in self.tree.files(g)]
                if readers and data.draw(st.booleans(), label="by shell.run"):
                    self.shell(reader, data.draw(st.sampled_from(readers), label="reading grant"),
                               program(SHOW, paths=target))
                else:
                    self.call(reader, "fs.read", {"path": os.fsdecode(target)})
        finally:
            self.tree.create(go)
            running.join()
        if isinstance(finished[0], BaseException):
            raise finished[0]

    @rule()
    def restart_brokerd(self) -> None:
        assert self.brokerd is not None
        self.brokerd.stop()
        self.check_record()
        self.brokerd.start()


def configure_brokerd(request: pytest.FixtureRequest,
                      configuration: str) -> tuple[str, dict[str, str], int | None, int]:
    """The same configurations, and skips, as every sandbox attack (conftest.caller), here
    with brokerd itself: as root, and (bubblewrap) as an unprivileged user. Its [broker]
    section, its environment, its uid (None: this process's) and the uid tools run as."""
    if configuration.startswith("bubblewrap"):
        if shutil.which("bwrap") is None:
            pytest.skip("bubblewrap is not installed (scripts/setup installs it)")
        section = 'backend = "bubblewrap"\n'
        tool_uid = DEFAULT_SANDBOX_UID if os.geteuid() == 0 else os.geteuid()
        if configuration == "bubblewrap-unprivileged":
            if os.geteuid() != 0:
                pytest.skip("the tests run unprivileged already: the bubblewrap case is that one")
            return section, {}, UNPRIVILEGED_UID, UNPRIVILEGED_UID
        return section, {}, None, tool_uid
    digest = request.getfixturevalue("toolkit_digest")
    image = f'backend = "podman"\npodman_image = "{IMAGE_NAME}@{digest}"\n'
    if configuration == "podman-remote":
        remote = request.getfixturevalue("podman_service")
        return image + f'podman_remote = "{remote}"\n', {}, None, DEFAULT_SANDBOX_UID
    storage = request.getfixturevalue("podman_store")
    # rootful podman runs tools as [broker] sandbox_uid
    return (image + f'containers_conf = "{CONTAINERS_CONF}"\n',
            {"CONTAINERS_STORAGE_CONF": str(storage_conf(storage))}, None, DEFAULT_SANDBOX_UID)


@contextlib.contextmanager
def serving_brokerd(request: pytest.FixtureRequest, configuration: str, prefix: str,
                    more_config: str = "", more_env: dict[str, str] | None = None
                    ) -> Iterator[tuple[Brokerd, Path, int]]:
    """A real ``brokerd serve`` in ``configuration`` under a fresh root (``more_config`` after
    its [broker] section, ``more_env`` in its environment): the brokerd, the root and the uid
    its tools run as. At the end it is stopped and its audit log must verify."""
    section, env, brokerd_uid, tool_uid = configure_brokerd(request, configuration)
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    brokerd = Brokerd(root / "broker", section + more_config, brokerd_uid,
                      {**env, **(more_env or {})})
    brokerd.start()
    try:
        yield brokerd, root, tool_uid
    finally:
        brokerd.stop()
        ok, said = brokerd.verify()
        shutil.rmtree(root, ignore_errors=True)
        assert ok, said


def configure(request: pytest.FixtureRequest, configuration: str) -> None:
    machine = FlowMachine
    machine.broker_section, machine.broker_env, machine.brokerd_uid, machine.tool_uid = \
        configure_brokerd(request, configuration)


def storage_conf(storage: tuple[str, ...]) -> Path:
    """A containers-storage.conf naming the test's private podman store, for brokerd's podman."""
    options = dict(zip(storage[::2], storage[1::2], strict=True))
    path = Path(options["--root"]).parent / "storage.conf"
    path.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{options["--root"]}"\n'
                    f'runroot = "{options["--runroot"]}"\n')
    return path


@hang_guard(trials=max(TOTAL_STEPS, STEPS * EXAMPLES), per_trial=10.0)
@pytest.mark.parametrize("configuration", FLOW_CONFIGURATIONS)
def test_data_keeps_its_label_through_every_flow(request, configuration):
    configure(request, configuration)
    FlowMachine.steps = 0
    examples = REMOTE_EXAMPLES if configuration == "podman-remote" else EXAMPLES
    run = settings(max_examples=examples, stateful_step_count=STEPS, deadline=None,
                   suppress_health_check=list(HealthCheck), print_blob=True,
                   report_multiple_bugs=False)
    # The long profile runs until TOTAL_STEPS steps have run (an example may stop early).
    while True:
        run_state_machine_as_test(FlowMachine, settings=run)
        if FlowMachine.steps >= TOTAL_STEPS:
            break
