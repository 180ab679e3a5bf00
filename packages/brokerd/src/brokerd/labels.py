"""Labels on mount roots: where data can flow between calls, held by construction. Pure: no I/O
(brokerd.labelstore keeps them on disk, brokerd.runner applies them around each call).

A *label* is a data class and a trust flag. Labels join (the higher class; untrusted if either
is) and only rise; only the owner lowers one (``brokerd labels lower``, audited). Every
writable mount root a call has had carries one, keyed by its real path on the host, and it
applies to everything at or under that path. Files are never labelled one by one, so nothing
a tool does to files (copy, hard link, rename of a parent, a name no encoder takes) can step
outside the rule: whatever a call writes lands in a labelled tree.

What a call can read: every mount its sandbox has (read-only or writable; both backends mount
all of the grant's mounts for every tool, ``fs.read`` included, whatever ``path`` it was given),
widened to its *zone*: the outermost labelled root that covers the mount. A call can read a
label on P when P overlaps (covers, or lies under) one of its zones. Two paths overlap exactly
when they share a point, since both are then ancestors of it. The zone is there for hard links
and renames: a sandbox can link or rename only within one of its mounts (across two mounts the
kernel says EXDEV), so a writable mount that covers two granted trees can tie a file in one to a
name in the other; from then on a write through the first is a write into the second.

Calls running at the same time that share a zone can also signal each other there, whatever
either may write: a FIFO or a Unix socket in a read-only mount, a lock on a file there, an inotify
watch. So among running calls every shared zone is a channel both ways, and a call's *exposure*
is all that has reached it while it runs: its session's taint, ``seen`` of its mounts, and the
output of every running call it shares a zone with (that call's exposure joined with the label
its grant gives what it produces). Exposure only grows while the call runs.

The rules, for a call C with mounts M(C), writable mounts W(C), exposure X(C) and output
O(C) = X(C) joined with its grant's label (untrusted when it has egress):

1. Before C starts, every root in W(C) is raised to O(C), and the raise is durable before the
   sandbox exists.
2. A raise (and C's own output) propagates through the running calls: a running call that can
   read a raised root, or shares a zone with C, has its exposure and its writable roots raised
   in turn, to a fixpoint, in the same step (``settle``).
3. C's result is raised to X(C) joined with ``seen(M(C))`` read when C ends.
4. A call that reaches the network never holds more than its grant allows (its ``Ceiling``):
   it does not start when its exposure would be over it, and no call starts that would push a
   running one over it. Whether a call is refused says something about what reached the calls
   it shares a zone with, so the refusal's answer carries their exposures and raises its
   session (brokerd.labelstore; docs/decisions/label-dependent-answers.md).

Invariant, for every running call C and every W in W(C), at every moment:
``label(W) >= O(C)``. Rule 1 makes it hold when C starts, rule 2 keeps it when any other call
starts, and labels only rise while calls run (the owner lowers one only while brokerd is
stopped), so it holds while C runs.

Property: any byte a call returns was, at every moment it was readable, under a label at most
the result's label, or came to it from a call that shared a zone with it, whose output is in its
exposure. A byte C reads from a file sits under one of C's mounts, so every label over it
overlaps a zone of C and is at most ``seen(M(C))`` then, and labels only rise, so at most at C's
end: rule 3. Such a byte got there by being written by some call D (through a root W in W(D),
which covers it) when it came from D's session, D's grant, or what reached D: all at most O(D),
which the invariant keeps under ``label(W)`` while D runs. By induction over writes and signals,
every byte in a labelled tree is under labels at least as high as where it came from, and a
result is raised to all of them.

What is not a zone, and so not covered: what every sandbox shares with every other, the system
directories, the toolkit, the filesystems' free space, the CPU, memory and the page cache. Calls
running at once can signal through those (a lock on a file in /usr, an inotify watch on one,
timing), and a call leaves a trace a later one reads in the free space of a filesystem it can
see and in which pages of the shared files are cached (attack 31o: thousands of bits a second).
The threat model states these covert channels as not defended.

What is coarse: a label covers a whole tree, so one secret file makes every later read of that
mount secret, and a clean session that writes into a labelled mount cannot lower it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bxcore.tools import DataClass


@dataclass(frozen=True)
class Label:
    data_class: DataClass = DataClass.PUBLIC
    untrusted: bool = False

    def join(self, other: Label) -> Label:
        return Label(max(self.data_class, other.data_class), self.untrusted or other.untrusted)

    def covers(self, other: Label) -> bool:
        """At least as high as ``other``: its class, and untrusted if ``other`` is."""
        return self.join(other) == self

    @property
    def plain(self) -> bool:
        return self == PLAIN

    def describe(self) -> str:
        return self.data_class.value + (", untrusted" if self.untrusted else ", trusted")


PLAIN = Label()  # public and trusted: the bottom of the lattice


def join_all(labels: Iterable[Label]) -> Label:
    found = PLAIN
    for label in labels:
        found = found.join(label)
    return found


def covers_path(outer: str, inner: str) -> bool:
    """``inner`` is ``outer`` or lies under it (both real, absolute paths)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def overlaps(a: str, b: str) -> bool:
    return covers_path(a, b) or covers_path(b, a)


@dataclass(frozen=True)
class Ceiling:
    """The most a call that reaches the network may hold while it runs: its grant's classes
    (every class up to the label's must be among them, since a label is a join), and untrusted
    content only when the grant allows it."""

    classes: frozenset[DataClass]
    untrusted: bool

    def admits(self, label: Label) -> bool:
        below = {c for c in DataClass if c <= label.data_class}
        return below <= self.classes and (self.untrusted or not label.untrusted)


@dataclass(frozen=True)
class Reach:
    """What one call's sandbox reaches: every mount root (host real paths) and the writable
    ones; what its session has seen (``taint``); the label its grant gives what it produces
    (``emits``: untrusted when it has egress); and, for a call with egress, its ``ceiling``."""

    mounts: frozenset[str]
    writes: frozenset[str]
    taint: Label = PLAIN
    emits: Label = PLAIN
    ceiling: Ceiling | None = None

    def __post_init__(self) -> None:
        if not self.writes <= self.mounts:
            raise ValueError("a writable mount is a mount: writes must be within mounts")

    @property
    def floor(self) -> Label:
        return self.taint.join(self.emits)


def zone(path: str, roots: Iterable[str]) -> str:
    """The outermost of ``roots`` that covers ``path``, or ``path`` itself."""
    return min((r for r in roots if covers_path(r, path)), key=len, default=path)


def zones(labels: Mapping[str, Label], mounts: Iterable[str]) -> set[str]:
    return {zone(m, labels) for m in mounts}


def seen(labels: Mapping[str, Label], mounts: Iterable[str]) -> Label:
    """The join of every label a call with these mounts can read."""
    reach = zones(labels, mounts)
    return join_all(label for root, label in labels.items()
                    if any(overlaps(root, z) for z in reach))


def share(labels: Mapping[str, Label], a: Iterable[str], b: Iterable[str]) -> bool:
    """Two calls with these mounts, running at once, can signal each other: they share a zone,
    whatever either may write (a FIFO, a socket, a lock or an inotify watch there is a channel)."""
    theirs = zones(labels, b)
    return any(overlaps(z, t) for z in zones(labels, a) for t in theirs)


@dataclass(frozen=True)
class Settled:
    """What ``settle`` found: the roots to raise (and their new labels), each call's exposure
    (all that has reached it: its session, its mounts, the calls it shares a zone with), and
    the calls whose exposure is over their ceiling (by index)."""

    raised: dict[str, Label]
    exposures: list[Label]
    over: list[int]


def settle(labels: Mapping[str, Label], calls: Sequence[Reach],
           exposures: Sequence[Label] = ()) -> Settled:
    """Make the invariant hold for every call in ``calls`` (running at once), given what has
    reached each so far (``exposures``, by index; PLAIN where missing). Every writable root
    gets a label (plain at first), so it is a zone from its first call on. Ends: each round
    raises a label or an exposure strictly, in a finite lattice over finitely many of them."""
    current = dict(labels)
    raised: dict[str, Label] = {}
    reached = [*exposures, *[PLAIN] * (len(calls) - len(exposures))]
    for root in sorted({w for call in calls for w in call.writes} - current.keys()):
        current[root] = raised[root] = PLAIN
    progress = True
    while progress:
        progress = False
        for i, call in enumerate(calls):
            inflow = reached[i].join(call.taint).join(seen(current, call.mounts))
            for j, other in enumerate(calls):
                if j != i and share(current, call.mounts, other.mounts):
                    inflow = inflow.join(reached[j]).join(other.floor)
            if inflow != reached[i]:
                reached[i], progress = inflow, True
            need = inflow.join(call.emits)
            for root in sorted(call.writes):
                if not current[root].covers(need):
                    current[root] = raised[root] = current[root].join(need)
                    progress = True
    over = [i for i, call in enumerate(calls)
            if call.ceiling is not None and not call.ceiling.admits(reached[i])]
    return Settled(raised, reached, over)
