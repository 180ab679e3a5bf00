"""The README's reading map of the trust core, and its table of the daemons' shape, are what
scripts/reading-map prints now: their line counts and module lists are the code's, not a figure
someone once wrote. The map is the whole trust core: every module of brokerd and the toolkit,
and every bxcore module they import, is in a step or on the short list of modules that decide
nothing, each with its reason. Every daemon has the shape the README names."""

from __future__ import annotations

import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from faults.profile import by_profile
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]


def _section(text: str, name: str) -> str:
    return text.split(f"<!-- {name} -->", 1)[1].split(f"<!-- /{name} -->", 1)[0].strip()


def test_the_readme_reading_map_and_daemon_shape_are_current():
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "reading-map")],
                             capture_output=True, text=True, check=True).stdout.strip()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = f"{_section(readme, 'reading-map')}\n\n{_section(readme, 'daemon-shape')}"
    assert shown == printed, "README.md is stale: run scripts/reading-map --write"


def test_every_module_of_the_trust_core_is_in_a_step_or_decides_nothing_with_a_reason():
    script = runpy.run_path(str(REPO / "scripts" / "reading-map"))
    assert script["unaccounted"]() == []
    reasons = script["DECIDES_NOTHING"]
    assert all(reason.strip() for reason in reasons.values())
    assert len(reasons) <= 20, "DECIDES_NOTHING is a short list: put what decides in a step"


@pytest.fixture(scope="module")
def copy_of_the_core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The script and the three packages' sources, copied: a test adds modules to the copy."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO / "scripts", root / "scripts")
    for package in ("brokerd", "toolkit", "bxcore"):
        shutil.copytree(REPO / "packages" / package / "src", root / "packages" / package / "src",
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root


# Not toolkit: its step is the whole directory, so a new toolkit module is in the map already.
PLACES = ["brokerd", "brokerd/policy", "brokerd/sandbox", "brokerd/audit", "bxcore",
          "bxcore/protocol"]


# Each example runs the script (a fraction of a second): 20 in the suite, 300 in the long run.
@settings(max_examples=by_profile(short=20, long=300), deadline=None)
@given(name=st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
       place=st.sampled_from(PLACES), imported_by_brokerd=st.booleans())
def test_a_new_module_in_no_step_is_refused_unless_nothing_in_the_core_imports_it(
        copy_of_the_core: Path, name: str, place: str, imported_by_brokerd: bool):
    """A new module of brokerd or the toolkit, or a new bxcore module that brokerd imports, in
    no step and not in DECIDES_NOTHING, makes the script refuse; a bxcore module nothing in the
    core imports is not part of it."""
    src = copy_of_the_core / "packages" / place.split("/")[0] / "src"
    module = src / place / f"new_{name}.py"
    importer = copy_of_the_core / "packages" / "brokerd" / "src" / "brokerd" / "__init__.py"
    original = importer.read_text()
    dotted = f"{place.replace('/', '.')}.new_{name}"
    try:
        module.write_text('"""A module the map does not name."""\n')
        if imported_by_brokerd:
            importer.write_text(f"{original}import {dotted}\n")
        run = subprocess.run([sys.executable, str(copy_of_the_core / "scripts" / "reading-map"),
                              "--check"],
                             capture_output=True, text=True)
        part_of_the_core = not place.startswith("bxcore") or imported_by_brokerd
        assert (run.returncode != 0) == part_of_the_core, run.stderr
        if part_of_the_core:
            assert f"{place}/new_{name}.py: in no step and not in DECIDES_NOTHING" in run.stderr
    finally:
        module.unlink()
        importer.write_text(original)


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
