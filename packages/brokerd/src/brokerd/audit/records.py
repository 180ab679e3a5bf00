"""The audit log's records, and the chain rule that links them. Pure.

Each line of ``audit/NNNNNNNN.jsonl`` is the canonical JSON of one record plus ``hash``::

    hash = sha256(canonical_json(record without "hash"))

where the record holds ``prev``, the previous record's ``hash`` (GENESIS for the first record
of the log), and ``seq``, its position in the whole log counting from 1. Rotation starts a new
file; the chain runs on through it. Changing the canonical encoding changes every hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

from bxcore._base import Count, Flag, Model, Text
from bxcore.canonical import canonical_json
from bxcore.ids import SessionId
from bxcore.records import Time
from bxcore.tools import DataClass, DecisionRecord
from bxcore.util import sha256
from pydantic import Field, SerializerFunctionWrapHandler, TypeAdapter, model_serializer

GENESIS = "sha256:" + "0" * 64


class Chained(Model):
    """What every record has: its place in the chain, when, and the hash of the one before."""

    seq: Annotated[int, Field(ge=1, strict=True)]
    time: Time
    prev: Text


class Consulted(Model):
    """The mount labels a decision depended on: its session's taint rose to them."""

    data_class: DataClass = Field(alias="class")
    untrusted: Flag


class DecisionEntry(Chained):
    """A policy decision, denials included. ``approval`` names the approval it asked for or
    that settled it; ``by`` who answered it; ``consulted`` the mount labels it depended on
    (brokerd.policy, rule 7), which its session's taint rose to. A record without them has no
    such member, so the records written before it existed keep their bytes."""

    kind: Literal["decision"] = "decision"
    decision: DecisionRecord
    approval: Text | None = None
    by: Text | None = None
    consulted: Consulted | None = None

    @model_serializer(mode="wrap")
    def _without_absent_consulted(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = dump(self)
        if body.get("consulted") is None:
            body.pop("consulted", None)
        return body


class ResultEntry(Chained):
    """What one allowed call gave back. The content itself is not kept (it may be secret);
    its hash is. ``reason`` is brokerd's own word on a call it closed without an answer
    (brokerd stopped, or was killed, while it ran: audit.opencalls); a record without one
    has no such member, so the records written before it existed keep their bytes."""

    kind: Literal["result"] = "result"
    session: SessionId
    call: Count
    tool: Text
    status: Literal["ok", "failed"]
    data_class: DataClass = Field(alias="class")
    untrusted: Flag
    truncated: Flag
    content_sha256: Text
    reason: Text | None = None

    @model_serializer(mode="wrap")
    def _without_absent_reason(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = dump(self)
        if body.get("reason") is None:
            body.pop("reason", None)
        return body


class RefusedEntry(Chained):
    """A request on broker.sock refused before any decision: its frame could not be decoded
    (text that is not Unicode, bad JSON) or is not a tool request. Whatever it named is kept
    when it could be read; ``request_sha256`` is the hash of its body when it had one."""

    kind: Literal["refused"] = "refused"
    reason: Text
    session: Text | None = None
    call: Count | None = None
    tool: Text | None = None
    request_sha256: Text | None = None


class LabelEntry(Chained):
    """The owner lowered a mount's label (``brokerd labels lower``; brokerd.labels): the path,
    the label it had, the label it has now, and the user who ran the command."""

    kind: Literal["label"] = "label"
    path: Text
    was_class: DataClass
    was_untrusted: Flag
    data_class: DataClass = Field(alias="class")
    untrusted: Flag
    by: Text


class RepairedEntry(Chained):
    """brokerd found the newest file ending in bytes that are not a whole line (a write cut
    short by a crash) and cut them off before appending again: which file, at what length,
    how many bytes, their hash, and the file beside the log that keeps them (brokerd.audit.log).
    Its members sort before ``hash``, as verify's fast check needs a member there."""

    kind: Literal["repaired"] = "repaired"
    cut_file: Text
    cut_at: Count
    cut_bytes: Count
    cut_sha256: Text
    cut_kept: Text


Entry = DecisionEntry | ResultEntry | RefusedEntry | LabelEntry | RepairedEntry
AuditEntry = Annotated[Entry, Field(discriminator="kind")]
AUDIT_ENTRY: TypeAdapter[Entry] = TypeAdapter(AuditEntry)


def taint_marks(entries: Iterable[Entry]) -> Iterator[tuple[str, DataClass, bool]]:
    """What raised each session's taint, in log order: its results' labels, and the mount
    labels its decisions depended on. The taint files are these, replayed (brokerd.taint)."""
    for entry in entries:
        if isinstance(entry, ResultEntry):
            yield entry.session, entry.data_class, entry.untrusted
        elif isinstance(entry, DecisionEntry) and entry.consulted is not None:
            yield (entry.decision.session, entry.consulted.data_class,
                   entry.consulted.untrusted)


def entry_hash(body: dict[str, Any]) -> str:
    """The hash of a record's JSON object, ``hash`` itself left out."""
    return sha256(canonical_json({k: v for k, v in body.items() if k != "hash"}))


def parse_line(raw: bytes) -> tuple[Entry, str]:
    """One line to its record and its stored hash. Raises ValueError (pydantic's
    ValidationError is one) when the line is not a record; the hash is not checked here."""
    body = json.loads(raw)
    if not isinstance(body, dict) or not isinstance(body.get("hash"), str):
        raise ValueError("not a JSON object with a 'hash'")
    stored = body.pop("hash")
    return AUDIT_ENTRY.validate_python(body), stored


def line_of(entry: Entry) -> tuple[bytes, str]:
    """The line to append (newline included) and the entry's hash."""
    body = entry.model_dump(mode="json", by_alias=True)
    digest = entry_hash(body)
    return canonical_json({**body, "hash": digest}) + b"\n", digest
