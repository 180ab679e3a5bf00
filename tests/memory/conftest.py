"""The real Honcho, started once for the tests of this directory and stopped after them (so its
deriver does no background work while the rest of the suite runs): 25-55 s to start here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .real_honcho import RealHoncho, start_real_honcho


@pytest.fixture(scope="package")
def real_honcho(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealHoncho]:
    real = start_real_honcho(tmp_path_factory.mktemp("honcho"))
    yield real
    real.stop()
