"""Tool calls as they cross from loopd to brokerd, and the plain record of a decision."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from ._base import Count, Flag, Model, Text
from .chat import ToolSchema
from .ids import SessionId

# The one real tool every session has (docs/design.md, "Core tools"): in the
# epoch's tools array in every configuration, since nothing volatile such as the time may be in
# the prompt. brokerd answers it by built-in policy, audited like any call.
CLOCK = ToolSchema(
    name="clock",
    description="The current date and time in UTC, as RFC 3339.",
    parameters={"type": "object", "properties": {}},
    core=True,
)


class DataClass(StrEnum):
    """How sensitive a tool result is. Ordered: a session's taint is the highest it has seen."""

    PUBLIC = "public"
    PRIVATE = "private"
    SECRET = "secret"

    @property
    def rank(self) -> int:
        return _RANK[self]

    # str's own comparisons would order these alphabetically; compare by rank instead.
    def __lt__(self, other: object) -> bool:
        return self.rank < _rank_of(other)

    def __le__(self, other: object) -> bool:
        return self.rank <= _rank_of(other)

    def __gt__(self, other: object) -> bool:
        return self.rank > _rank_of(other)

    def __ge__(self, other: object) -> bool:
        return self.rank >= _rank_of(other)

    __hash__ = StrEnum.__hash__


def _rank_of(other: object) -> int:
    if not isinstance(other, DataClass):
        raise TypeError(f"cannot compare a DataClass with {type(other).__name__}")
    return other.rank


_RANK = {DataClass.PUBLIC: 0, DataClass.PRIVATE: 1, DataClass.SECRET: 2}


class ToolRequest(Model):
    """One call the model asked for. ``arguments`` is the JSON text of the inner object."""

    session: SessionId
    call: Count  # per-session counter, increasing across turns
    tool: Annotated[Text, Field(min_length=1, max_length=64)]
    arguments: Text


Status = Literal["ok", "denied", "failed"]


class ToolResponse(Model):
    """What came back for a ToolRequest.

    ``status`` is ``ok`` when the tool ran; ``denied`` when policy refused it (no grant, a deny
    grant, an approval refused or expired); ``failed`` when it was allowed but did not complete.
    In every case ``content`` is the text the model sees.
    """

    status: Status
    content: Text
    data_class: DataClass = Field(alias="class")
    untrusted: Flag
    truncated: Flag


TRUNCATED_MARK = "\n[truncated]"  # ends a result cut to its cap (loopd's and brokerd's caps)


def plain_response(status: Status, content: str) -> ToolResponse:
    """A public, trusted, uncut answer: what a role says itself (a refusal, a failure, the time),
    as opposed to a tool's output, which carries its own class and taint."""
    return ToolResponse(status=status, content=content, data_class=DataClass.PUBLIC,
                        untrusted=False, truncated=False)


def valid_unicode(text: str) -> str:
    """``text`` with each lone surrogate written out as an escape, so it is text every UTF-8
    encoder takes: ``\\xff`` for a byte that was not UTF-8 (a file name Python decoded with
    surrogateescape), ``\\ud800`` for any other. The same object when there is none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escaped(character) for character in text)
    return text


def _escaped(character: str) -> str:
    code = ord(character)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if 0xD800 <= code <= 0xDFFF else character


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """``text`` if its UTF-8 fits in ``cap`` bytes; otherwise as much as fits, cut at a
    character boundary, with TRUNCATED_MARK appended (the whole stays within ``cap``), and
    whether it was cut."""
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text, False
    room = max(0, cap - len(TRUNCATED_MARK.encode("utf-8")))
    # A cut inside a multi-byte character leaves an incomplete tail; "ignore" drops only it.
    return data[:room].decode("utf-8", errors="ignore") + TRUNCATED_MARK, True


Verdict = Literal["allow", "ask", "deny"]


class DecisionRecord(Model):
    """The plain, serialisable record of a policy decision: for the audit log and the wire.

    It grants nothing. Only brokerd's policy module can make the ``Decision`` that lets a tool run.
    """

    session: SessionId
    call: Count
    tool: Text
    arguments_sha256: Text
    verdict: Verdict
    grant: Text | None  # the grant file that decided, None when no grant matched
    reason: Text
