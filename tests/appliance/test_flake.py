"""`nix flake check` evaluates: Nix 2.8's own flake check (--no-build) runs over the flake with
its nixpkgs input replaced by nixpkgs' real lib/ and a stand-in `pkgs`
(nixos-modules/tests/stub-pkgs.nix) whose derivations are made from all their arguments, so
every output (packages, images, overlay, module, checks, formatter) is evaluated in full. The
stand-in, unlike nixpkgs, refuses to let python3.withPackages drop an application and has no
python3Packages.import-linter, which is how nixpkgs is: the two blockers the flake had.

Not proved here: that nixpkgs 26.05 has every attribute the flake uses with the same meaning
(only the owner's `nix flake check` can), or that anything builds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .nix import NIXPKGS_LIB, REPO, needs_nix, needs_nixpkgs_lib, nix_env, nix_eval

pytestmark = [needs_nix, needs_nixpkgs_lib]

STUB = REPO / "nixos-modules" / "tests" / "stub-pkgs.nix"
STUB_FLAKE = """{
  outputs = { self }:
    let
      lib = import ./lib;
      pypi = builtins.fromJSON (builtins.readFile ./pypi.json);
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ]
        (_: import ./stub-pkgs.nix { inherit lib pypi; });
    };
}
"""


def repository_files() -> list[str]:
    """The files a flake of this checkout holds: tracked ones, and new ones not yet ignored."""
    if shutil.which("git") is None:
        pytest.fail("this test copies the checkout's files with `git ls-files`: git is missing")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def flakes(tmp_path_factory):
    """(the checkout as a flake source, the stand-in nixpkgs flake)."""
    root = tmp_path_factory.mktemp("h16-flake")
    source, nixpkgs = root / "source", root / "nixpkgs"
    for name in repository_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(NIXPKGS_LIB, nixpkgs / "lib")
    shutil.copy2(STUB, nixpkgs / "stub-pkgs.nix")
    workspace = nix_eval(f"(import {REPO}/nix/workspace.nix {{ }}).packages")
    pypi = sorted({name for member in workspace.values() for name in member["pypi"]})
    (nixpkgs / "pypi.json").write_text(json.dumps(pypi))
    (nixpkgs / "flake.nix").write_text(STUB_FLAKE)
    return source, nixpkgs


def flake_check(source: Path, nixpkgs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix", "flake", "check", "--no-build", "--override-input", "nixpkgs",
         f"path:{nixpkgs}", f"path:{source}"],
        capture_output=True, text=True, env=nix_env(), check=False, timeout=300,
    )  # fmt: skip


def test_nix_flake_check_evaluates_every_output(flakes):
    done = flake_check(*flakes)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr


def test_the_check_has_teeth_a_test_python_of_applications_fails_naming_them(flakes, tmp_path):
    """The flake's old testPython (withPackages over toPythonApplication results) is refused."""
    source, nixpkgs = flakes
    broken = tmp_path / "source"
    shutil.copytree(source, broken)
    checks = broken / "nix" / "checks.nix"
    text = checks.read_text()
    assert "builtins.attrValues boxmaker.members" in text
    checks.write_text(text.replace("boxmaker.members", "boxmaker.applications"))
    done = flake_check(broken, nixpkgs)
    assert done.returncode != 0
    assert re.search(r"withPackages would drop .*loopd-", done.stderr), done.stderr


def test_the_flake_follows_the_supported_release_and_its_lock_is_the_owners_to_write():
    """nixos-26.05. The build machine cannot reach GitHub, so no lock is committed (a narHash
    that was never fetched would be invented); once the owner commits one, it must pin the
    same branch to a full revision with its hash. docs/deploy.md says how."""
    flake = (REPO / "flake.nix").read_text()
    assert 'inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";' in flake
    lock_file = REPO / "flake.lock"
    if lock_file.exists():
        lock = json.loads(lock_file.read_text())
        locked, original = lock["nodes"]["nixpkgs"]["locked"], lock["nodes"]["nixpkgs"]["original"]
        assert original["ref"] == "nixos-26.05"
        assert re.fullmatch(r"[0-9a-f]{40}", locked["rev"])
        assert re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", locked["narHash"])
    deploy = (REPO / "docs" / "deploy.md").read_text()
    assert "nix flake lock" in deploy and "nixos-26.05" in deploy

