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

The rules, for a call C with mounts M(C), writable mounts W(C) and floor F(C) (the session's
taint joined with the label its grant gives its results, untrusted when it has egress):

1. Before C starts, every root in W(C) is raised to F(C) joined with ``seen(M(C))``, and the
   raise is durable before the sandbox exists.
2. A raise propagates through the running calls: a running call that can read a raised root
   has its own writable roots raised in turn, to a fixpoint, in the same step (``settle``).
3. C's result is raised to ``seen(M(C))`` read when C ends.

Invariant, for every running call C and every W in W(C), at every moment:
``label(W) >= F(C) | seen(M(C))``. Rule 1 makes it hold when C starts, rule 2 keeps it when any
other call starts, and labels only rise while calls run (the owner lowers one only while
brokerd is stopped), so it holds while C runs.

Property: any byte a call returns was, at every moment it was readable, under a label at most
the result's label. A byte C reads sits under one of C's mounts, so every label over it overlaps
a zone of C and is at most ``seen(M(C))`` then, and labels only rise, so at most at C's end:
rule 3. Such a byte got there by being written by some call D (through a root W in W(D), which
covers it) when it came from D's session, D's grant, or what D could read: all at most
``F(D) | seen(M(D))``, which the invariant keeps under ``label(W)`` while D runs. By induction
over writes, every byte in a labelled tree is under labels at least as high as where it came
from, and a result is raised to all of them.

What is coarse: a label covers a whole tree, so one secret file makes every later read of that
mount secret, and a clean session that writes into a labelled mount cannot lower it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
class Reach:
    """What one call's sandbox reaches: every mount root (host real paths), the writable ones,
    and its floor (the session's taint joined with its grant's result label)."""

    mounts: frozenset[str]
    writes: frozenset[str]
    floor: Label

    def __post_init__(self) -> None:
        if not self.writes <= self.mounts:
            raise ValueError("a writable mount is a mount: writes must be within mounts")


def zone(path: str, roots: Iterable[str]) -> str:
    """The outermost of ``roots`` that covers ``path``, or ``path`` itself."""
    return min((r for r in roots if covers_path(r, path)), key=len, default=path)


def seen(labels: Mapping[str, Label], mounts: Iterable[str]) -> Label:
    """The join of every label a call with these mounts can read."""
    zones = {zone(m, labels) for m in mounts}
    return join_all(label for root, label in labels.items()
                    if any(overlaps(root, z) for z in zones))


def settle(labels: Mapping[str, Label], calls: Iterable[Reach]) -> dict[str, Label]:
    """The raises that make the invariant hold for every call in ``calls``: each writable root
    that must change, and its new label. Every writable root gets a label (plain at first), so
    it is a zone from its first call on. Ends: each round raises at least one label strictly,
    in a finite lattice over finitely many roots."""
    current = dict(labels)
    changed: dict[str, Label] = {}
    calls = list(calls)
    for root in sorted({w for call in calls for w in call.writes} - current.keys()):
        current[root] = changed[root] = PLAIN
    progress = True
    while progress:
        progress = False
        for call in calls:
            need = call.floor.join(seen(current, call.mounts))
            for root in sorted(call.writes):
                if not current[root].covers(need):
                    current[root] = changed[root] = current[root].join(need)
                    progress = True
    return changed
