"""Evaluating the builtins-only Nix code with Debian's Nix 2.8, offline.

Every call sets an empty ``substituters`` (without it Nix spends seconds retrying
cache.nixos.org) and enables flakes, as ../shared/reference/containers-nix-systemd.md measured.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.requires import needs

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "nixos-modules" / "lib.nix"
NIX_CONFIG = "experimental-features = nix-command flakes\nsubstituters =\nwarn-dirty = false"

# nixpkgs' lib/ (the real module system), which evaluates under Nix 2.8; not part of the
# repository (../shared/reference/nixpkgs-lib here; BOXMAKER_NIXPKGS_LIB elsewhere).
REFERENCE_LIB = REPO.parent / "shared" / "reference" / "nixpkgs-lib" / "lib"
NIXPKGS_LIB = Path(os.environ.get("BOXMAKER_NIXPKGS_LIB", REFERENCE_LIB))
needs_nixpkgs_lib = pytest.mark.skipif(
    not (NIXPKGS_LIB / "modules.nix").is_file(),
    reason=f"nixpkgs' lib/ is not at {NIXPKGS_LIB} (set BOXMAKER_NIXPKGS_LIB)",
)

needs_nix = needs("nix-instantiate")


def nix_env() -> dict[str, str]:
    return {**os.environ, "NIX_CONFIG": NIX_CONFIG}


def nix_string(value: str | Path) -> str:
    """A Nix string literal (JSON's escapes are Nix's, except that ${ must be escaped)."""
    return json.dumps(str(value)).replace("${", "\\${")


def nix_run(expression: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "-E", expression],
        capture_output=True, text=True, env=nix_env(), cwd=REPO, check=False, timeout=120,
    )  # fmt: skip


def nix_eval(expression: str) -> Any:
    """The strict JSON value of a Nix expression; a failure shows Nix's own message."""
    done = nix_run(expression)
    if done.returncode != 0:
        raise AssertionError(f"nix-instantiate failed:\n{done.stderr}")
    return json.loads(done.stdout)


def nix_error(expression: str) -> str:
    """Nix's message for an expression that must fail to evaluate."""
    done = nix_run(expression)
    assert done.returncode != 0, f"evaluated, but must fail: {done.stdout[:500]}"
    return done.stderr


def lib_expression(manifest: Path | None = None) -> str:
    argument = "{ }" if manifest is None else f"{{ manifestFile = {manifest}; }}"
    return f"(import {LIB} {argument})"
