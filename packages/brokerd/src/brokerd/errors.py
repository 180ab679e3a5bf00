"""Errors of brokerd.

    BrokerError
    ├── GrantError          a grant file is unreadable or invalid; names the file and the key.
    │                       The file grants nothing (it is never read as a wider grant).
    ├── JobError            a job file is unreadable or invalid; names the file and the key
    ├── AuditError          the audit log cannot be read or appended to (names the file, line)
    ├── TaintError          a session's taint file is unreadable or invalid (names the file)
    ├── EgressLogError      the egress log cannot be appended to or read (names the file,
    │                       line); an outbound call whose payload cannot be logged is not run
    ├── CallReused          a tool request names a (session, call) brokerd has seen before; it
    │                       is refused (audited) and nothing runs
    ├── LabelError          the mount labels (labels.jsonl) cannot be read or appended to
    │                       (names the file, line); a call whose raises cannot be written
    │                       does not run
    └── ApprovalError       an approval answer that does not count (the peer did it wrong)
        ├── UnknownApproval     no pending approval has this id (never issued, or already used)
        ├── ApprovalMismatch    the id was issued for another call (tool or arguments differ)
        ├── ApprovalExpired     the approval ran out of time before it was answered
        └── NotAnApprover       whoever answered is not on the owner's allowlist

    AuditError, TaintError, CallReused and ApprovalError are also bxcore Refused errors: one that
    reaches a socket's answer crosses it with its ``code`` (``unavailable``: brokerd's state
    cannot be written; ``bad_request``; an approval's own codes) and its message
    (bxcore.daemon.answering). Any other failure there is answered ``internal``.

    NotAuthorized           a tool was about to run without a genuine, unused, allowing Decision
                            (a forged, used or refusing one): a bug in brokerd (we did it wrong).
                            Deliberately not a BoxmakerError, so that no handler of expected
                            failures absorbs it; brokerd.policy re-exports it.
"""

from __future__ import annotations

from bxcore.errors import BoxmakerError, ErrorCode, Refused

from .labels import PLAIN, Label


class NotAuthorized(Exception):
    """A tool was about to run without a genuine, unused, allowing Decision."""


class BrokerError(BoxmakerError):
    """Base class of every error brokerd raises on purpose."""


class GrantError(BrokerError):
    pass


class JobError(BrokerError):
    pass


class AuditError(BrokerError, Refused):
    code = ErrorCode.UNAVAILABLE


class TaintError(BrokerError, Refused):
    code = ErrorCode.UNAVAILABLE


class EgressLogError(BrokerError):
    pass


class LabelError(BrokerError):
    """The mount labels cannot be read or written. ``consulted``: the labels whether it
    happened depends on (a raise is written only when one is needed), for its answer's label."""

    def __init__(self, why: str, consulted: Label = PLAIN):
        super().__init__(why)
        self.consulted = consulted


class FlowRefused(LabelError):
    """A call would bring data over the ceiling of a call that reaches the network.
    ``consulted``: the labels the refusal depends on (what reached the calls it looked at);
    whether it happens says something about them, so its answer is labelled with them."""


class ApprovalError(BrokerError, Refused):
    code = ErrorCode.UNKNOWN_APPROVAL


class UnknownApproval(ApprovalError):
    pass


class ApprovalMismatch(ApprovalError):
    code = ErrorCode.BAD_REQUEST


class ApprovalExpired(ApprovalError):
    code = ErrorCode.EXPIRED


class NotAnApprover(ApprovalError):
    code = ErrorCode.DENIED


class CallReused(BrokerError, Refused):
    """A tool request's (session, call) was sent before: refused, audited, nothing ran."""

    code = ErrorCode.BAD_REQUEST
