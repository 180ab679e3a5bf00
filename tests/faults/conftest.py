"""The fault suite's profiles and rigs.

``BOXMAKER_PROFILE=long`` selects the deep run (hundreds of crash trials, 100k fuzz inputs per
parser, every load figure); anything else is the short profile CI runs through scripts/test.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .profile import LONG, by_profile

__all__ = ["LONG", "by_profile", "short_dir"]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A temp dir with a short path: socket paths must fit in 108 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="bxf-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
