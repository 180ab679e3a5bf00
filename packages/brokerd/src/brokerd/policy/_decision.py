"""``Decision``: the only value that lets a tool run. Only brokerd's policy package makes one.

The constructor needs ``_MINT``, a capability private to this package. A Decision cannot be
pickled, copied or deserialised into existence, and each one is recorded when minted, so even an
instance forged with ``object.__new__`` is refused by ``authorize()``. A Decision authorizes one
run: ``authorize()`` consumes it.

An ``ask`` Decision holds the spec the grant would allow but never hands it out: only
``settle`` turns it, once, into an allowing Decision or a denial.
"""

from __future__ import annotations

import weakref

from bxcore.tools import DataClass, DecisionRecord

from ..errors import NotAuthorized
from ..labels import PLAIN, Ceiling, Label
from ..sandbox.spec import Mount, SandboxSpec

_MINT = object()
_ISSUED: weakref.WeakSet[Decision] = weakref.WeakSet()


class Decision:
    __slots__ = ("__weakref__", "_consulted", "_record", "_spec", "_used")
    _record: DecisionRecord
    _spec: SandboxSpec | None
    _consulted: Label
    _used: bool

    def __init__(self, mint: object, *, record: DecisionRecord, spec: SandboxSpec | None,
                 consulted: Label = PLAIN):
        if mint is not _MINT:
            raise TypeError("a Decision can only be made by brokerd's policy module")
        if (record.verdict == "deny") != (spec is None):
            raise TypeError("an allowing or asking Decision carries a spec, a denial does not")
        object.__setattr__(self, "_record", record)
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_consulted", consulted)
        object.__setattr__(self, "_used", False)
        _ISSUED.add(self)

    @property
    def record(self) -> DecisionRecord:
        """The plain record for the audit log and the wire."""
        return self._record

    @property
    def mounts(self) -> tuple[Mount, ...]:
        """What the call's sandbox mounts (none for a denial): to know what it can read and
        write. Information only; running still needs ``authorize()``."""
        return self._spec.mounts if self._spec is not None else ()

    @property
    def result_label(self) -> tuple[DataClass, bool]:
        """The label its grant gives the call's results: the class, and whether they are
        untrusted (a call with egress is, whatever the tool says). Information only."""
        if self._spec is None:
            return DataClass.PUBLIC, False
        return self._spec.data_class, bool(self._spec.hosts)

    @property
    def ceiling(self) -> Ceiling | None:
        """What the call may hold while it runs, when it reaches the network. Information only."""
        return self._spec.ceiling if self._spec is not None else None

    @property
    def consulted(self) -> Label:
        """The mount labels this decision depended on (brokerd.labels): whatever it answers
        tells the session something about them, so the answer and the session's taint are
        raised to them. PLAIN when it depended on the grants and the session's taint only."""
        return self._consulted

    def decides_as(self, other: Decision) -> bool:
        """Whether ``other`` decides the call as this one does: the same verdict and grant, and
        the same sandbox to the last field (mounts, hosts, secrets, result class, limits, the
        path a file tool opens). Information only."""
        return (self._record.verdict, self._record.grant, self._spec) == \
            (other._record.verdict, other._record.grant, other._spec)

    @property
    def allowed(self) -> bool:
        return bool(self._record.verdict == "allow")

    def verify(self) -> None:
        """Check, without using it up, that this Decision would authorize a run."""
        self._check("allow")

    def authorize(self) -> SandboxSpec:
        """The spec to run, once. Raises NotAuthorized for a forged, used or refusing Decision."""
        spec = self._check("allow")
        object.__setattr__(self, "_used", True)
        return spec

    def _check(self, verdict: str) -> SandboxSpec:
        if self not in _ISSUED:
            raise NotAuthorized("this Decision was not made by the policy module")
        if self._used:
            raise NotAuthorized("this Decision was already used")
        if self._record.verdict != verdict or self._spec is None:
            raise NotAuthorized(f"the decision was {self._record.verdict}: {self._record.reason}")
        return self._spec

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Decision is immutable")

    def __reduce__(self) -> str:
        raise TypeError("a Decision cannot be pickled")

    def __copy__(self) -> Decision:
        raise TypeError("a Decision cannot be copied")

    def __deepcopy__(self, memo: object) -> Decision:
        raise TypeError("a Decision cannot be copied")

    def __repr__(self) -> str:
        r = self._record
        return f"<Decision {r.verdict} {r.tool} call={r.call} session={r.session}>"


def mint(record: DecisionRecord, spec: SandboxSpec | None,
         consulted: Label = PLAIN) -> Decision:
    """For the policy package's own modules only."""
    return Decision(_MINT, record=record, spec=spec, consulted=consulted)


def settle(asked: Decision, *, approved: bool, reason: str) -> Decision:
    """What a genuine, unused ``ask`` Decision becomes once the owner has answered (or failed
    to in time): an allowing Decision with the spec its grant allows when ``approved``, else a
    denial. Uses ``asked`` up; raises NotAuthorized for anything else."""
    spec = asked._check("ask")
    object.__setattr__(asked, "_used", True)
    record = asked._record.model_copy(update={
        "verdict": "allow" if approved else "deny", "reason": reason})
    return mint(record, spec if approved else None, asked._consulted)
