"""The README's reading map of the trust core, and its table of the daemons' shape, are what
scripts/reading-map prints now: their line counts and module lists are the code's, not a figure
someone once wrote. Every daemon has the shape the README names."""

from __future__ import annotations

import runpy
import subprocess
import sys
import tomllib
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


def test_every_daemon_has_the_shape_as_an_import_contract():
    """Each daemon is under an exhaustive import-linter layers contract that puts cli over
    wiring over sockets over the rest of the role (lint-imports checks the imports: the logic
    never imports its sockets or its wiring), its logic layer every other module of the role
    (a ``__main__`` may sit over cli)."""
    script = runpy.run_path(str(REPO / "scripts" / "reading-map"))
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    checked = {}
    for contract in config["contracts"]:
        if contract["type"] == "layers" and len(contract.get("containers", [])) == 1:
            checked[contract["containers"][0]] = contract
    assert sorted(checked) == sorted(script["DAEMONS"])
    for role, contract in checked.items():
        assert contract.get("exhaustive") is True, role
        *shape, logic = [layer for layer in contract["layers"] if layer != "__main__"]
        assert shape == ["cli", "wiring", "sockets"], role
        src = REPO / "packages" / role / "src" / role
        modules = sorted(path.stem for path in src.iterdir()
                         if (path.suffix == ".py" or (path / "__init__.py").is_file())
                         and path.stem not in {"__init__", "__main__", *shape})
        assert sorted(name.strip() for name in logic.split(":")) == modules, role
