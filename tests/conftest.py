"""Test-wide settings: hypothesis profiles, and a private state directory for every test."""

from __future__ import annotations

import os

import pytest
from faults import ledger
from hypothesis import HealthCheck, settings
from support.llama import llama_router, llama_router_proxy
from support.requires import require

# `pytest --left-out=gate|flake` (make gate, the flake check): tests/left-out.json.
pytest_plugins = ["support.left_out"]
# The session's one llama-server router (and inferproxy before it), here so that every test
# that asks for it shares it: imported into each module, each module started its own.
__all__ = ["llama_router", "llama_router_proxy"]

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=100_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _private_state(tmp_path_factory, monkeypatch):
    """No test touches a real home: BOXMAKER_HOME and BOXMAKER_RUN point into a temp dir."""
    root = tmp_path_factory.mktemp("boxmaker")
    (root / "home").mkdir()
    (root / "run").mkdir()
    monkeypatch.setenv("BOXMAKER_HOME", str(root / "home"))
    monkeypatch.setenv("BOXMAKER_RUN", str(root / "run"))
    return root


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@needs("podman")`` (tests/support/requires.py): skip without the program, or fail when
    scripts/setup ran and should have installed it."""
    for mark in item.iter_markers("needs"):
        require(*mark.args)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With a ledger (tests/faults/ledger.py, set by scripts/reliability), every test's outcome
    and time: the long run's report lists each test it ran from these lines."""
    if report.when == "call" or report.outcome != "passed":
        ledger.record("test", report.nodeid, phase=report.when, outcome=report.outcome,
                      seconds=round(report.duration, 1))
