"""The consult egress log read back, as the tests check it (brokerd only appends to it)."""

from __future__ import annotations

import logging
from pathlib import Path

from brokerd.egresslog import EgressRecord
from brokerd.errors import EgressLogError
from pydantic import ValidationError

log = logging.getLogger("tests.egresslog")


def read_egress_log(path: Path) -> list[EgressRecord]:
    """Every record in order; EgressLogError names the first line that is not one. A last line
    with no newline is a torn end (a write a crash cut short: never sent, and cut aside at the
    next append) and is left out, logged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise EgressLogError(f"{path}: cannot read: {exc.strerror}") from None
    lines = data.split(b"\n")
    if lines[-1]:
        log.warning("%s: %d torn bytes at its end (never sent) left out", path, len(lines[-1]))
    records = []
    for number, line in enumerate(lines[:-1], start=1):
        try:
            records.append(EgressRecord.model_validate_json(line))
        except ValidationError as exc:
            raise EgressLogError(f"{path}:{number}: not an egress record: "
                                 f"{exc.errors()[0]['msg']}") from None
    return records
