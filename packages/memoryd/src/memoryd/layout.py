"""Where memoryd's files live under the state directory (``[paths] home``).

    memory/soul.md memory.md user.md   identity, read once per epoch into the baseline
    memory/notes.md                    experience, append-only
    memory/edits/<seq>.json            the journal: one file per write, never rewritten
    index/recall.sqlite                the FTS5 index; disposable, rebuilt by ``memoryd reindex``
    index/state.sqlite                 hit counts and the Honcho sync ledger; kept by reindex
    sessions/<id>/<epoch>.jsonl        loopd's session logs, read-only here
    broker/sessions/<id>.json          brokerd's taint files, read-only here
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The identity files and the characters each may hold (IdentityFile.limit on memory.sock).
IDENTITY_LIMITS: dict[str, int] = {"soul.md": 4000, "memory.md": 2200, "user.md": 1375}


@dataclass(frozen=True)
class Layout:
    home: Path

    @property
    def memory(self) -> Path:
        return self.home / "memory"

    @property
    def notes(self) -> Path:
        return self.memory / "notes.md"

    @property
    def edits(self) -> Path:
        return self.memory / "edits"

    @property
    def index(self) -> Path:
        return self.home / "index"

    @property
    def recall_db(self) -> Path:
        return self.index / "recall.sqlite"

    @property
    def state_db(self) -> Path:
        return self.index / "state.sqlite"

    @property
    def sessions(self) -> Path:
        return self.home / "sessions"

    @property
    def taint_files(self) -> Path:
        return self.home / "broker" / "sessions"

    def identity(self, name: str) -> Path:
        if name not in IDENTITY_LIMITS:
            raise ValueError(f"not an identity file: {name!r}")
        return self.memory / name

    def ensure(self) -> None:
        """Create memoryd's own directories: its user writes, the units' group reads. Run by
        another user (the owner's ``bxctl memory log``), existing ones are left as they are."""
        for directory in (self.memory, self.edits, self.index):
            directory.mkdir(mode=0o750, parents=True, exist_ok=True)
            if directory.stat().st_uid == os.geteuid():
                os.chmod(directory, 0o750)


def read_text(path: Path) -> str:
    """A memory file's text; a missing file is empty."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
