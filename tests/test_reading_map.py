"""The README's reading map of the trust core is what scripts/reading-map prints now: its line
counts are the code's, not a figure someone once wrote."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_reading_map_is_current():
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "reading-map")],
                             capture_output=True, text=True, check=True).stdout.strip()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = readme.split("<!-- reading-map -->", 1)[1].split("<!-- /reading-map -->", 1)[0]
    assert shown.strip() == printed, "README.md is stale: run scripts/reading-map --write"


def test_every_file_it_names_exists():
    script = runpy.run_path(str(REPO / "scripts" / "reading-map"))
    for _title, names, _what in script["STEPS"]:
        for name in names:
            path = REPO / "packages" / name.split("/")[0] / "src" / name
            assert path.exists(), f"scripts/reading-map names {name}, which is gone"
