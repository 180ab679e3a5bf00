"""What must hold of the state files after any fault: the checks every fault test runs.

- every session log parses, or is refused with loopd's own error naming its file and line;
- every turn a client saw finish (its ``turn_done``) is in the log;
- the audit chain verifies;
- every taint file equals what ``brokerd taint rebuild`` derives from the audit log;
- notes.md and the memory edit journal parse, or are refused naming their file.
"""

from __future__ import annotations

import filecmp
import subprocess
import tempfile
from pathlib import Path

from brokerd.audit.log import verify
from bxcore.records import Assistant
from loopd.errors import CorruptSession
from loopd.store import STAGING, SessionStore
from memoryd.errors import StoreError
from memoryd.journal import Journal
from memoryd.notes import read_notes

from .stack import BIN


def session_problems(home: Path) -> dict[str, str]:
    """Sessions that do not open: id -> loopd's refusal (which must name file and line)."""
    refused = {}
    sessions = home / "sessions"
    for directory in sorted(sessions.iterdir()) if sessions.is_dir() else ():
        if directory.name.startswith(STAGING):
            continue  # a creation a crash cut short: loopd removes it when it starts
        try:
            SessionStore(home).open(directory.name)
        except CorruptSession as exc:
            refused[directory.name] = str(exc)
    return refused


def answers_in_log(home: Path, session: str) -> list[str]:
    records = SessionStore(home).open(session).records
    return [r.content for r in records if isinstance(r, Assistant) and r.content is not None]


def audit_problems(home: Path) -> list[str]:
    bad, _head = verify(home / "audit")
    return [str(link) for link in bad]


def taint_mismatches(config: Path, home: Path) -> list[str]:
    """Taint files that differ from their rebuild from the audit log (either way round)."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([str(BIN / "brokerd"), "taint", "rebuild", "--config", str(config),
                        "--out", out], check=True, capture_output=True)
        live = home / "broker" / "sessions"
        names = {p.name for p in Path(out).iterdir()} | (
            {p.name for p in live.iterdir()} if live.is_dir() else set())
        return sorted(f"{n}: live {_text(live / n)}, rebuilt {_text(Path(out) / n)}"
                      for n in names if not (live / n).is_file() or not (Path(out) / n).is_file()
                      or not filecmp.cmp(live / n, Path(out) / n, shallow=False))


def _text(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else "(none)"


def memory_problems(home: Path) -> list[str]:
    problems = []
    for check in (lambda: read_notes(home / "memory" / "notes.md"),
                  lambda: Journal(home / "memory" / "edits").entries()):
        try:
            check()
        except StoreError as exc:
            problems.append(str(exc))
    return problems


def assert_consistent(config: Path, home: Path) -> None:
    for session, why in session_problems(home).items():
        # A refusal is allowed only as a clear error naming the file and the line.
        assert f"sessions/{session}/" in why and "line" in why, why
    assert audit_problems(home) == []
    mismatches = taint_mismatches(config, home)
    assert mismatches == [], mismatches
    assert memory_problems(home) == []
