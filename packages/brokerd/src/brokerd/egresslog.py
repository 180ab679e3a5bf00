"""The egress log: every payload ``consult`` sends off the owner's hosts, in full, written
before the call runs (docs/design.md, "Authority contract"; docs/egress.md).

``<home>/egress/consult.jsonl``: one canonical-JSON record per line, appended and fsynced, the
file 0600 in a 0700 directory, so the owner (brokerd's user) reads it and no one else does.
brokerd is its only writer; nothing in it is ever rewritten. A record says when, for which
session and call, under which grant, to which endpoint, with which model and temperature, and
the call's arguments exactly as the program receives them: the question and the attachments,
the only fields the payload is built from (docs/egress.md shows the body). The record is
written first; if it cannot be written, nothing is sent.

``ConsultEgress`` also turns ``[consult]`` into the ``ToolSettings`` brokerd's policy and the
toolkit's ``consult`` program read: the endpoint's settings, the one egress host a consult grant
must name, and the API key's secret.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

from bxcore._base import Count, Model, Text
from bxcore.config import ConsultSection
from bxcore.ids import SessionId
from bxcore.tools import ToolRequest
from bxcore.util import fsync_dir, now_rfc3339
from pydantic import StrictFloat, StrictInt, ValidationError

from .errors import EgressLogError
from .policy import NOT_AN_OBJECT, CallArguments
from .sandbox import ToolSettings

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

    def _append(self, line: bytes) -> None:
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o750)
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            with os.fdopen(fd, "wb") as handle:
                handle.write(line)  # one write: a record is never interleaved or split
                handle.flush()
                os.fsync(handle.fileno())
            if created:
                fsync_dir(directory)
        except OSError as exc:
            raise EgressLogError(f"{self.path}: cannot append: {exc.strerror}") from None


def read_egress_log(path: Path) -> list[EgressRecord]:
    """Every record in order; EgressLogError names the first line that is not one."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise EgressLogError(f"{path}: cannot read: {exc.strerror}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(EgressRecord.model_validate_json(line))
        except ValidationError as exc:
            raise EgressLogError(f"{path}:{number}: not an egress record: "
                                 f"{exc.errors()[0]['msg']}") from None
    return records
