"""images/ (bximage and the role images) and tests/ (support.llama) are not packages of the
workspace: put them on sys.path for the appliance tests."""

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
for _path in (_REPO / "images", _REPO / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
