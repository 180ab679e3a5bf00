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


def test_the_rebuilt_performance_document_keeps_every_section_a_benchmark_writes():
    """The summary writes the document again from its sections: a benchmark's own section and
    the ones it writes on request (``day --peers``: ``day-peers``) stay, in the order
    scripts/bench runs them; a section no benchmark writes goes (the summary's rewrite once
    dropped day-peers)."""
    summary = importlib.import_module("summary_bench")

    def section(name: str) -> str:
        return f"<!-- bench:{name} -->\n{name}'s figures\n<!-- /bench:{name} -->"

    doc = "\n\n".join(section(name) for name in ("day-peers", "summary", "orphan", "broker",
                                                 "day"))
    assert summary.rebuilt(doc) == "# Performance\n\n" + "\n\n".join(
        section(name) for name in ("summary", "broker", "day", "day-peers")) + "\n"
