from __future__ import annotations

from pathlib import Path

import pytest
from brokerd_support import Rig, make_rig


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return make_rig(tmp_path)
