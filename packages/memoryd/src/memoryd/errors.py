"""Errors of memoryd.

One that reaches memory.sock's answer crosses it as ``internal`` with its message, logged as
memoryd's failure (bxcore.daemon.answering); on memory-owner.sock, as ``bad_request``.

    MemorydError (a bxcore Refused)
    ├── WriteRefused        the memory rules refuse a write (sanitizer, limit, no such entry,
    │   │                   bad plan); the message is meant for the model and the owner
    │   └── TaintRefused    an identity edit from a session that has read untrusted content
    ├── StoreError          a file under memory/ or sessions/ is not what memoryd expects (a torn
    │   │                   notes.md, a journal entry that does not parse); names the file
    │   └── CommandRefused  an owner's undo, accept or reject cannot be done (the file changed
    │                       since, nothing to undo, notes.md is append-only, no such staged edit)
    ├── SessionTaintUnreadable  brokerd's broker/sessions/<id>.json, as memoryd reads it; names
    │                       the file (bxcore's TaintFileError, in memoryd's tree)
    ├── IndexCorrupt        the recall index cannot be opened or migrated; names the file
    └── HonchoError         a request to Honcho did not succeed
        ├── HonchoUnavailable   connection refused, timed out, no bytes for too long, or 5xx
        ├── HonchoRejected      4xx: we sent something Honcho does not take (e.g. a 422)
        └── HonchoBadResponse   the peer did it wrong: an empty stream, a body that is not the
                                shape the v3 spec gives
"""

from __future__ import annotations

from bxcore.errors import ErrorCode, Refused


class MemorydError(Refused):
    """Base class of every error memoryd raises on purpose."""

    code = ErrorCode.INTERNAL


class WriteRefused(MemorydError):
    pass


class TaintRefused(WriteRefused):
    pass


class StoreError(MemorydError):
    pass


class CommandRefused(StoreError):
    code = ErrorCode.BAD_REQUEST


class SessionTaintUnreadable(MemorydError):
    pass


class IndexCorrupt(MemorydError):
    pass


class HonchoError(MemorydError):
    pass


class HonchoUnavailable(HonchoError):
    pass


class HonchoRejected(HonchoError):
    def __init__(self, status: int, detail: str):
        super().__init__(f"Honcho refused the request with HTTP {status}: {detail}")
        self.status = status


class HonchoBadResponse(HonchoError):
    pass
