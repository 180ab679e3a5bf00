"""The real Honcho, once per test session (about 15-40 s to start: see real_honcho.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .real_honcho import RealHoncho, start_real_honcho


@pytest.fixture(scope="session")
def real_honcho(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealHoncho]:
    real = start_real_honcho(tmp_path_factory.mktemp("honcho"))
    yield real
    real.stop()
