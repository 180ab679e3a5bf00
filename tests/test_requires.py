"""A program scripts/setup installs is never silently missing: skipped for a developer without
setup, a failure under scripts/test (tests/support/requires.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import requires

REPO = Path(__file__).resolve().parents[1]

ABSENT = "strace"  # one of SETUP_INSTALLS; the tests below make it look absent


@pytest.fixture
def without_program(monkeypatch):
    monkeypatch.setattr(requires.shutil, "which", lambda name: None if name == ABSENT else name)


def test_a_missing_program_is_a_skip_without_setup(without_program, monkeypatch):
    monkeypatch.delenv("BOXMAKER_SETUP_DONE", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"needs {ABSENT}"):
        requires.require(ABSENT)


def test_a_missing_program_is_a_failure_after_setup(without_program, monkeypatch):
    monkeypatch.setenv("BOXMAKER_SETUP_DONE", "1")
    with pytest.raises(pytest.fail.Exception, match="setup ran and it is missing"):
        requires.require(ABSENT)


def test_a_present_program_passes_either_way(without_program, monkeypatch):
    monkeypatch.setenv("BOXMAKER_SETUP_DONE", "1")
    requires.require("podman")


def test_a_program_setup_does_not_install_cannot_be_required(monkeypatch):
    monkeypatch.setattr(requires.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="not programs scripts/setup installs"):
        requires.require("not-a-setup-program")


def test_every_required_program_is_in_setup():
    """SETUP_INSTALLS names programs; each comes from a package scripts/setup lists (or the
    machine's base system, for node, npm, ip and the systemd tools)."""
    setup = (REPO / "scripts" / "setup").read_text()
    packages = {"bwrap": "bubblewrap", "podman": "podman", "skopeo": "skopeo", "runc": "runc",
                "crun": "crun", "strace": "strace", "nix-instantiate": "nix-bin", "ip": "iproute2"}
    for program, package in packages.items():
        assert program in requires.SETUP_INSTALLS
        assert f" {package}" in setup or f"({package}" in setup, package
