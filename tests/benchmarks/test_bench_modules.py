"""Every benchmark under bench/ still imports against today's packages: a rename in a role
(a module, a class, a function) breaks a benchmark that no test runs, and scripts/bench stops
there. Importing runs no benchmark (each runs from its ``__main__`` block)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py")))
def test_the_benchmark_module_imports(name):
    module = importlib.import_module(name)
    if name.endswith("_bench"):
        assert callable(getattr(module, "main", None)), f"bench/{name}.py has no main()"
