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


# Roles not yet held to the shape by an import contract, and why (docs/decisions/daemon-shape.md).
SHAPE_NOT_CHECKED = {
    "loopd": "sockets.py builds Sessions through wiring.sessions after the start-up checks",
    "inferproxy": "sockets.py takes its ProxyParts type from wiring.py",
}


def test_the_shape_is_an_import_contract_for_every_role_that_holds_it():
    """Each daemon is either under an exhaustive import-linter layers contract that puts cli
    over wiring over sockets over the rest of the role (lint-imports checks the imports), or
    on the short list above with its reason."""
    script = runpy.run_path(str(REPO / "scripts" / "reading-map"))
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    checked = {}
    for contract in config["contracts"]:
        if contract["type"] == "layers" and len(contract.get("containers", [])) == 1:
            checked[contract["containers"][0]] = contract
    assert set(checked) | set(SHAPE_NOT_CHECKED) == set(script["DAEMONS"])
    assert not set(checked) & set(SHAPE_NOT_CHECKED)
    for role, contract in checked.items():
        layers = [layer for layer in contract["layers"] if layer != "__main__"]
        assert layers[:3] == ["cli", "wiring", "sockets"], role
        assert len(layers) == 4 and contract.get("exhaustive") is True, role
