"""The egress log: every payload ``consult`` sends off the owner's hosts, in full, written
before the call runs (docs/design.md, "Authority contract"; docs/egress.md).

``<home>/egress/consult.jsonl``: one canonical-JSON record per line, appended and fsynced, the
file 0640 in a 0750 directory (brokerd writes it, the owners' group reads it, as every state
file: docs/decisions/state-permissions.md). brokerd is its only writer; no record in it is ever
rewritten. A record says when, for which
session and call, under which grant, to which endpoint, with which model and temperature, and
the call's arguments exactly as the program receives them: the question and the attachments,
the only fields the payload is built from (docs/egress.md shows the body). The record is
written first; if it cannot be written, nothing is sent. It is written to brokerd's state
filesystem, so it is inside the audit log's reserve: a consult call is not run while the
record would leave less than the reserves free there (brokerd.runner). A write that fails is
cut back to the last whole record, and a torn end a crash left is cut aside (kept beside the
log) before the next record, as the audit log does (brokerd.audit.log).

``ConsultEgress`` also turns ``[consult]`` into the ``ToolSettings`` brokerd's policy and the
toolkit's ``consult`` program read: the endpoint's settings, the one egress host a consult grant
must name, and the API key's secret.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

from bxcore._base import Count, Model, Text
from bxcore.config import ConsultSection
from bxcore.ids import SessionId
from bxcore.tools import ToolRequest
from bxcore.util import fsync_dir, now_rfc3339, whole_lines, write_all, write_durably
from pydantic import StrictFloat, StrictInt

from .errors import EgressLogError
from .policy import NOT_AN_OBJECT, CallArguments
from .sandbox import ToolSettings

log = logging.getLogger("brokerd.egress")

CONSULT: Final = "consult"
LOG_NAME = "consult.jsonl"


class EgressRecord(Model):
    time: Text
    session: SessionId
    call: Count
    tool: Literal["consult"]
    grant: Text | None
    endpoint: Text
    model: Text
    temperature: StrictFloat
    max_tokens: StrictInt | None
    arguments: dict[str, Any]  # the call's JSON arguments: question and attachments


def consult_settings(section: ConsultSection) -> ToolSettings:
    """What the config fixes for ``consult``: the settings its program is given (no secret in
    them, only the secret's name), the one host its grant must name, and the key to inject."""
    settings = {
        "endpoint": section.endpoint,
        "model": section.model,
        "temperature": section.temperature,
        "max_tokens": section.max_tokens,
        "api_key_secret": section.api_key,
        "first_byte_timeout": section.first_byte_timeout,
        "liveness_timeout": section.liveness_timeout,
    }
    return ToolSettings(
        text=json.dumps(settings, sort_keys=True, separators=(",", ":")),
        hosts=(section.egress_host(),),
        secrets=(section.api_key,) if section.api_key else (),
    )


class ConsultEgress:
    """The configured consult endpoint and its egress log."""

    def __init__(self, section: ConsultSection, directory: Path,
                 clock: Callable[[], str] = now_rfc3339):
        self.section = section
        self.path = directory / LOG_NAME
        self.settings = consult_settings(section)
        self._clock = clock

    def record(self, request: ToolRequest, arguments: CallArguments, grant: str | None
               ) -> EgressRecord:
        """Append the payload ``request`` is about to send (``arguments``: its arguments, parsed
        once by the caller); EgressLogError if it cannot be written (then the call must not
        run)."""
        if arguments.value is None:
            raise EgressLogError(f"call {request.call}: {NOT_AN_OBJECT}")
        record = EgressRecord(
            time=self._clock(), session=request.session, call=request.call, tool=CONSULT,
            grant=grant, endpoint=self.section.endpoint, model=self.section.model,
            temperature=self.section.temperature, max_tokens=self.section.max_tokens,
            arguments=dict(arguments.value),
        )
        self._append(record.canonical() + b"\n")
        return record

    def where(self) -> Path:
        """The nearest directory of the log that exists: the filesystem its next record goes
        to, for the reserve check before a consult call (brokerd.audit.space)."""
        for each in (self.path.parent, *self.path.parent.parents):
            if each.is_dir():
                return each
        return self.path.parent

    def _append(self, line: bytes) -> None:
        """Append one record, fsynced. A torn end left by a crash is cut aside first
        (``repair``); a write that fails is cut back to the last whole record, so the log never
        keeps a torn line or a record whose payload was not sent."""
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o750)
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
        except OSError as exc:
            raise EgressLogError(f"{self.path}: cannot append: {exc.strerror}") from None
        try:
            size = self._repair(fd)
            try:
                write_all(fd, line)  # a failed write is cut back below
                os.fsync(fd)
                if created:
                    fsync_dir(directory)
            except OSError as exc:
                self._cut(fd, size)
                raise EgressLogError(f"{self.path}: cannot append: {exc.strerror}") from None
        finally:
            os.close(fd)

    def _cut(self, fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as exc:  # left torn: the next append cuts it aside first
            log.error("%s: a failed append cannot be cut back (%s)", self.path, exc.strerror)

    def _repair(self, fd: int) -> int:
        """The log's length once whatever follows its last newline (a write a crash or a
        failed cut back left torn; never sent) is kept beside it, in ``consult.jsonl.torn-<at>``,
        and cut off, logged. EgressLogError when that cannot be done: nothing is sent."""
        size, at = os.fstat(fd).st_size, whole_lines(fd)
        if at == size:
            return size
        torn = os.pread(fd, size - at, at)
        kept = self.path.with_name(f"{self.path.name}.torn-{at}")
        try:
            write_durably(kept, torn, mode=0o640)
            os.ftruncate(fd, at)
            os.fsync(fd)
        except OSError as exc:
            raise EgressLogError(f"{self.path}: ends in {len(torn)} torn bytes that cannot be "
                                 f"kept aside ({exc.strerror})") from None
        log.warning("%s: %d torn bytes at its end (a write cut short, never sent) moved to %s",
                    self.path, len(torn), kept.name)
        return at
