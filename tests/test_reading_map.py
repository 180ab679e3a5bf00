"""The README's reading map of the trust core, and its table of the daemons' shape, are what
scripts/reading-map prints now: their line counts and module lists are the code's, not a figure
someone once wrote. Every daemon has the shape the README names."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _section(text: str, name: str) -> str:
    return text.split(f"<!-- {name} -->", 1)[1].split(f"<!-- /{name} -->", 1)[0].strip()


def test_the_readme_reading_map_and_daemon_shape_are_current():
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "reading-map")],
                             capture_output=True, text=True, check=True).stdout.strip()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = f"{_section(readme, 'reading-map')}\n\n{_section(readme, 'daemon-shape')}"
    assert shown == printed, "README.md is stale: run scripts/reading-map --write"


def test_every_daemon_has_cli_wiring_and_sockets_and_none_of_the_old_names():
    script = runpy.run_path(str(REPO / "scripts" / "reading-map"))
    assert sorted(script["DAEMONS"]) == ["brokerd", "gatewayd", "inferproxy", "loopd", "memoryd"]
    for role in script["DAEMONS"]:
        src = REPO / "packages" / role / "src" / role
        missing = [name for name in script["SHAPE"] if not (src / name).is_file()]
        assert missing == [], f"{role} has no {missing}"
        old = [name for name in ("serve.py", "server.py", "service.py", "daemon.py")
               if (src / name).exists()]
        assert old == [], f"{role} still has {old}: the shape is cli, wiring, sockets"


def test_every_file_it_names_exists():
    script = runpy.run_path(str(REPO / "scripts" / "reading-map"))
    for _title, names, _what in script["STEPS"]:
        for name in names:
            path = REPO / "packages" / name.split("/")[0] / "src" / name
            assert path.exists(), f"scripts/reading-map names {name}, which is gone"
