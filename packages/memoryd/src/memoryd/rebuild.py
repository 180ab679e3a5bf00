"""``memoryd reindex``: a fresh recall index from the files alone, renamed into place."""

from __future__ import annotations

import contextlib
import os

from bxcore.config import Config

from .index import RecallIndex
from .layout import Layout
from .notes import read_notes
from .taint import read_taint_file


def reindex(config: Config) -> dict[str, int]:
    layout = Layout(config.paths.home)
    layout.ensure()
    fresh = layout.recall_db.with_name(layout.recall_db.name + ".new")
    with contextlib.suppress(FileNotFoundError):
        fresh.unlink()  # a build that crashed earlier
    index = RecallIndex(fresh, layout.sessions, config.memory.ceiling)
    try:
        index.catch_up(lambda s: read_taint_file(layout.taint_files, s), read_notes(layout.notes))
        counts = index.counts()
    finally:
        index.close()
    os.replace(fresh, layout.recall_db)  # a running memoryd sees the new inode and reopens
    return counts
