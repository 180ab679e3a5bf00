"""The real Honcho, started once for the tests of this directory and stopped after them (so its
deriver does no background work while the rest of the suite runs): 25-55 s to start here."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .real_honcho import RealHoncho, start_real_honcho


@pytest.fixture(scope="package")
def real_honcho(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealHoncho]:
    real = start_real_honcho(tmp_path_factory.mktemp("honcho"))
    yield real
    real.stop()
    # How long the server took, for whoever keeps the suite's time small.
    (tmp_path_factory.getbasetemp() / "honcho-fixture.json").write_text(json.dumps(
        {"started_in_s": round(real.started_in, 1),
         "api_starts_s": [round(t, 1) for t in real.api_starts]}) + "\n")
