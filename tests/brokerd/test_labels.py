"""brokerd.labels, the pure core of the flow: labels on mount roots, raised before a call starts
and propagated through the calls still running.

The judge is a model of the files themselves: cells of content, each holding the labels of
where its bytes came from, named by paths that calls write, copy, hard link (within one mount)
and rename (within one mount), while other calls run. Whatever the interleaving:

Calls running at once may also signal each other (a FIFO, a socket, a lock, an inotify watch)
wherever both reach one file or one point: what the sender holds reaches the receiver. Calls
that reach the network carry a ceiling. Whatever the interleaving:

- every byte a call read, or was signalled, comes back in a result labelled at least where it
  came from;
- for every running call, each root it writes is at least its floor joined with all it can read;
- a call with a ceiling never holds anything its ceiling does not admit: a start that would
  bring it over is refused, and changes nothing;
- labels only rise, and propagation ends in a fixpoint (settling again changes nothing).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

import hypothesis.strategies as st
import pytest
from brokerd.labels import (
    PLAIN,
    Ceiling,
    Label,
    Reach,
    covers_path,
    overlaps,
    seen,
    settle,
    zone,
)
from bxcore.tools import DataClass
from faults.profile import by_profile
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

# Nested and overlapping roots, with a sibling whose name shares a prefix (/r/a, /r/ab).
DIRS = ("/r", "/r/a", "/r/a/b", "/r/ab")
FILES = ("x", "y")
labels_st = st.builds(Label, st.sampled_from(list(DataClass)), st.booleans())
# A grant's classes are, in practice, the classes up to one of them.
ceilings_st = st.none() | st.builds(
    Ceiling, st.sampled_from([frozenset(c for c in DataClass if c <= top) for top in DataClass]),
    st.booleans())


@dataclass
class Running:
    token: int
    reach: Reach
    read: set[Label] = field(default_factory=set)  # the origins of every byte it has read
    exposure: Label = PLAIN  # what brokerd's store keeps for it

    @property
    def holds(self) -> set[Label]:
        return {self.reach.floor, *self.read}


def under(path: str, root: str) -> bool:
    return covers_path(root, path)


class Flow(RuleBasedStateMachine):
    """Calls start, read, write, copy, link and rename, and end; the labels are brokerd's."""

    @initialize()
    def empty(self) -> None:
        self.labels: dict[str, Label] = {}
        self.running: dict[int, Running] = {}
        self.files: dict[str, int] = {}  # path -> cell (hard links share a cell)
        self.cells: dict[int, set[Label]] = {}  # cell -> the origins of its bytes
        self.serial = 0

    def _apply(self, changes: dict[str, Label]) -> None:
        for path, label in changes.items():
            old = self.labels.get(path)
            assert old is None or label.covers(old), "a raise lowered a label"
        self.labels.update(changes)

    @rule(data=st.data(), taint=labels_st, emits=labels_st, ceiling=ceilings_st)
    def start(self, data: st.DataObject, taint: Label, emits: Label,
              ceiling: Ceiling | None) -> None:
        mounts = data.draw(st.sets(st.sampled_from(DIRS), min_size=1, max_size=3))
        writes = data.draw(st.sets(st.sampled_from(sorted(mounts))))
        reach = Reach(frozenset(mounts), frozenset(writes), taint, emits, ceiling)
        running = list(self.running.values())
        settled = settle(self.labels, [*(r.reach for r in running), reach],
                         [r.exposure for r in running])
        if settled.over:
            return  # refused: brokerd's store applies nothing of it
        self._apply(settled.raised)
        for call, exposure in zip(running, settled.exposures, strict=False):
            assert exposure.covers(call.exposure), "an exposure fell"
            call.exposure = exposure
        self.serial += 1
        self.running[self.serial] = Running(self.serial, reach, exposure=settled.exposures[-1])
        self.running[self.serial].read.add(taint)  # the session's own data is in it

    def _reaches(self, call: Running) -> set[int | str]:
        """What a call can signal through: every file it reaches, and every point of its
        mounts (where it could make or find a FIFO or a socket)."""
        cells: set[int | str] = {c for p, c in self.files.items()
                                 if any(under(p, m) for m in call.reach.mounts)}
        return cells | set(call.reach.mounts)

    @precondition(lambda self: len(self.running) > 1)
    @rule(data=st.data())
    def signal(self, data: st.DataObject) -> None:
        """One running call signals another through a file both reach, or a point both mount."""
        sender, receiver = data.draw(st.permutations(list(self.running.values())))[:2]
        mine, theirs = self._reaches(sender), self._reaches(receiver)
        common = mine & theirs or {
            1 for a in sender.reach.mounts for b in receiver.reach.mounts if overlaps(a, b)}
        if common:
            receiver.read |= sender.holds

    def _pick_call(self, data: st.DataObject, *, writing: bool = False) -> Running | None:
        calls = [r for r in self.running.values() if r.reach.writes or not writing]
        return data.draw(st.sampled_from(calls)) if calls else None

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        call = self._pick_call(data)
        assert call is not None
        readable = sorted(p for p in self.files if any(under(p, m) for m in call.reach.mounts))
        if readable:
            call.read |= self.cells[self.files[data.draw(st.sampled_from(readable))]]

    @precondition(lambda self: self.running)
    @rule(data=st.data(), name=st.sampled_from(FILES))
    def write(self, data: st.DataObject, name: str) -> None:
        """Write (or copy what it read) into any file under a root it writes."""
        call = self._pick_call(data, writing=True)
        if call is None:
            return
        path = posixpath.join(data.draw(st.sampled_from(sorted(call.reach.writes))),
                              data.draw(st.sampled_from(("", *DIRS[1:]))).lstrip("/"), name)
        if path not in self.files:
            self.serial += 1
            self.files[path] = self.serial
            self.cells[self.serial] = set()
        self.cells[self.files[path]] |= call.holds

    def _in_one_mount(self, data: st.DataObject) -> tuple[Running, str] | None:
        call = self._pick_call(data, writing=True)
        if call is None:
            return None
        return call, data.draw(st.sampled_from(sorted(call.reach.writes)))

    @precondition(lambda self: self.running and self.files)
    @rule(data=st.data(), name=st.sampled_from(FILES))
    def hard_link(self, data: st.DataObject, name: str) -> None:
        """A new name for a file, both within one writable mount (the kernel allows no more)."""
        found = self._in_one_mount(data)
        if found is None:
            return
        _call, root = found
        inside = sorted(p for p in self.files if under(p, root))
        if inside:
            target = data.draw(st.sampled_from([d for d in DIRS if under(d, root)] or [root]))
            self.files[posixpath.join(target, name + "-link")] = \
                self.files[data.draw(st.sampled_from(inside))]

    @precondition(lambda self: self.running and self.files)
    @rule(data=st.data())
    def rename_directory(self, data: st.DataObject) -> None:
        """Move a directory (and all under it) elsewhere within one writable mount."""
        found = self._in_one_mount(data)
        if found is None:
            return
        _call, root = found
        dirs = sorted({posixpath.dirname(p) for p in self.files if under(p, root)} - {root})
        if not dirs:
            return
        old = data.draw(st.sampled_from(dirs))
        new = posixpath.join(root, data.draw(st.sampled_from(("moved", "a", "b", "ab"))))
        if overlaps(old, new):
            return
        for path in [p for p in self.files if under(p, old)]:
            self.files[new + path[len(old):]] = self.files.pop(path)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        call = self._pick_call(data)
        assert call is not None
        del self.running[call.token]
        result = call.exposure.join(seen(self.labels, call.reach.mounts))
        for origin in call.read:
            assert result.covers(origin), (origin, result, call.reach, self.labels)

    @invariant()
    def every_running_call_writes_under_all_that_reached_it(self) -> None:
        for call in self.running.values():
            need = call.reach.floor.join(seen(self.labels, call.reach.mounts))
            for root in call.reach.writes:
                assert self.labels[root].covers(need), (root, self.labels, call.reach)
                for origin in call.holds:
                    assert self.labels[root].covers(origin), (root, self.labels, call.reach)

    @invariant()
    def a_call_with_a_ceiling_holds_nothing_over_it(self) -> None:
        for call in self.running.values():
            if call.reach.ceiling is not None:
                for origin in call.read:
                    assert call.reach.ceiling.admits(origin), (origin, call.reach)

    @invariant()
    def propagation_is_a_fixpoint(self) -> None:
        running = list(self.running.values())
        settled = settle(self.labels, [r.reach for r in running], [r.exposure for r in running])
        assert settled.raised == {} and settled.exposures == [r.exposure for r in running]


Flow.TestCase.settings = settings(max_examples=by_profile(200, 5_000), stateful_step_count=40,
                                  deadline=None)
test_flow = Flow.TestCase


def test_a_copy_from_a_secret_mount_raises_the_mount_it_writes_before_the_call_starts():
    secret = Label(DataClass.SECRET, False)
    labels = {"/data/secret": secret}
    copy = Reach(frozenset({"/data/secret", "/work"}), frozenset({"/work"}), PLAIN)
    assert settle(labels, [copy]).raised == {"/work": secret}


def test_a_raise_reaches_a_running_call_that_reads_it_and_what_that_one_writes():
    reader = Reach(frozenset({"/in", "/out"}), frozenset({"/out"}), PLAIN)
    further = Reach(frozenset({"/out", "/far"}), frozenset({"/far"}), PLAIN)
    labels = settle({}, [reader, further]).raised
    writer = Reach(frozenset({"/in"}), frozenset({"/in"}), Label(DataClass.PRIVATE, True))
    raised = settle(labels, [reader, further, writer]).raised
    assert raised == {path: Label(DataClass.PRIVATE, True) for path in ("/in", "/out", "/far")}


@pytest.mark.parametrize(("mount", "expected"), [
    ("/data/public", DataClass.SECRET),  # inside the zone of /data: a link may tie it to secret
    ("/data/secret/x", DataClass.SECRET),
    ("/datax", DataClass.PUBLIC),  # a sibling whose name shares a prefix
    ("/", DataClass.SECRET),
])
def test_what_a_mount_sees_is_its_zone(mount, expected):
    labels = {"/data": PLAIN, "/data/secret": Label(DataClass.SECRET, False)}
    assert zone("/data/public", labels) == "/data"
    assert seen(labels, [mount]).data_class == expected


def test_a_hard_link_made_under_a_wide_mount_carries_a_later_write_to_the_other_name():
    """C (writing /data) links /data/secret/f to /data/public/f and ends; D (writing
    /data/secret, a secret session) rewrites f in place; E (reading /data/public only) reads the
    link: the kernel let the link be made within one mount, so E's zone is all of /data."""
    wide = Reach(frozenset({"/data"}), frozenset({"/data"}), PLAIN)
    labels = settle({}, [wide]).raised  # C ran and ended
    secret = Reach(frozenset({"/data/secret"}), frozenset({"/data/secret"}),
                   Label(DataClass.SECRET, False))
    labels |= settle(labels, [secret]).raised
    assert seen(labels, ["/data/public"]) == Label(DataClass.SECRET, False)


def test_a_secret_call_that_only_reads_a_mount_reaches_a_call_that_writes_it_while_both_run():
    """A FIFO in /x: the secret call has /x read-only, yet it can write into the pipe."""
    secret = Label(DataClass.SECRET, False)
    reader = Reach(frozenset({"/x"}), frozenset({"/x"}))
    labels = settle({}, [reader]).raised
    sender = Reach(frozenset({"/x", "/vault"}), frozenset(), secret)
    settled = settle(labels, [reader, sender])
    assert settled.exposures[0] == secret and settled.raised == {"/x": secret}


def test_a_call_with_egress_does_not_start_beside_a_secret_call_it_shares_a_mount_with():
    public_only = Ceiling(frozenset({DataClass.PUBLIC}), untrusted=False)
    egress = Reach(frozenset({"/x"}), frozenset(), emits=Label(DataClass.PUBLIC, True),
                   ceiling=public_only)
    secret = Reach(frozenset({"/x"}), frozenset(), Label(DataClass.SECRET, False))
    assert settle({}, [egress, secret]).over == [0]
    assert settle({}, [egress, Reach(frozenset({"/y"}), frozenset(), secret.taint)]).over == []


def test_a_call_with_egress_may_not_hold_what_its_mounts_hold():
    egress = Reach(frozenset({"/notes"}), frozenset(), ceiling=Ceiling(
        frozenset({DataClass.PUBLIC, DataClass.PRIVATE}), untrusted=True))
    assert settle({"/notes": Label(DataClass.SECRET, False)}, [egress]).over == [0]
    assert settle({"/notes": Label(DataClass.PRIVATE, True)}, [egress]).over == []
