"""The Nix layer, as far as Debian's Nix 2.8 without nixpkgs can check it.

Every .nix file parses (which also catches undefined variables); the builtins-only parts
evaluate; the flake's ``lib`` output is lib.nix; the workspace Nix builds from agrees with the
pyproject files. The whole flake and the module: test_flake.py and test_nixos_module.py.
"""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest

from .nix import LIB, REPO, needs_nix, nix_env, nix_eval

NIX_FILES = sorted(
    path
    for path in REPO.rglob("*.nix")
    if not {".venv", ".git"} & set(path.relative_to(REPO).parts)
)

pytestmark = needs_nix


def test_the_flake_the_module_the_checks_and_the_vm_test_are_there():
    names = {path.relative_to(REPO).as_posix() for path in NIX_FILES}
    assert {"flake.nix", "nixos-modules/default.nix", "nixos-modules/lib.nix",
            "nixos-modules/tests/vm.nix", "nix/packages.nix", "nix/checks.nix",
            "nix/workspace.nix", "nixos-modules/tests/eval.nix",
            "nixos-modules/tests/nixos-options.nix",
            "nixos-modules/tests/stub-pkgs.nix"} <= names  # fmt: skip


@pytest.mark.parametrize("path", NIX_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_nix_file_parses_with_no_undefined_variable(path):
    done = subprocess.run(
        ["nix-instantiate", "--parse", str(path)],
        capture_output=True, text=True, env=nix_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_an_undefined_variable_is_caught_by_the_parse_check(tmp_path):
    broken = tmp_path / "broken.nix"
    broken.write_text("{ x }: x + undefinedThing\n")
    done = subprocess.run(
        ["nix-instantiate", "--parse", str(broken)],
        capture_output=True, text=True, env=nix_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "undefined variable 'undefinedThing'" in done.stderr


def test_the_flake_lib_output_is_lib_nix_and_needs_no_nixpkgs():
    flake = (
        f"((import {REPO}/flake.nix).outputs {{ self = {{ }}; "
        f'nixpkgs = throw "nixpkgs is not needed for lib"; }}).lib'
    )
    assert nix_eval(f"{flake}.fixedSettings") == nix_eval(f"(import {LIB} {{ }}).fixedSettings")
    assert nix_eval(f"{flake}.manifest") == json.loads(
        (REPO / "packages/bxctl/src/bxctl/stack/roles.json").read_text()
    )


def test_the_workspace_nix_builds_from_agrees_with_every_pyproject():
    workspace = nix_eval(f"import {REPO}/nix/workspace.nix {{ }}")
    members = sorted(
        p.name for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists()
    )
    assert workspace["members"] == members
    for name in members:
        project = tomllib.loads((REPO / "packages" / name / "pyproject.toml").read_text())[
            "project"
        ]
        described = workspace["packages"][name]
        assert described["version"] == project["version"]
        assert sorted(described["scripts"]) == sorted(project.get("scripts", {}))
        required = {dep.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower()
                    .replace("_", "-") for dep in project.get("dependencies", [])}  # fmt: skip
        assert set(described["workspace"]) | set(described["pypi"]) == required
        assert set(described["workspace"]) <= set(members)


def test_every_role_of_the_manifest_has_a_workspace_package_with_its_console_script():
    workspace = nix_eval(f"import {REPO}/nix/workspace.nix {{ }}")["packages"]
    manifest = nix_eval(f"(import {LIB} {{ }}).manifest")
    for role, spec in manifest["roles"].items():
        assert spec["command"][0] in workspace[role]["scripts"]

