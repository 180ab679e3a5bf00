"""``pytest --left-out=gate|flake|fast``: the suite minus what tests/left-out.json lists, with
why.

One list for the runs that do not run everything: ``make gate`` (offline, no model server, no
root) leaves out the listed markers and root-only tests; the flake's ``tests`` check
(nix/checks.nix) leaves out those and, on top, the files that need what its build sandbox lacks
(``flake``); ``scripts/test --fast``, the inner loop, leaves out the gate's and, on top, the few
files and tests that need root or cost most of its time (``fast``). scripts/test passes no
option and runs the whole suite. A listed path or test that no longer exists stops the run
before collection: ``--ignore`` and ``--deselect`` of a gone path are silent, this is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

LIST = Path(__file__).resolve().parents[1] / "left-out.json"
RUNS = ("gate", "flake", "fast")
# Each run's own section, left out on top of ``markers`` and ``root`` (which every run leaves out).
OWN = {"gate": None, "flake": "flake", "fast": "fast"}


@dataclass(frozen=True, kw_only=True)
class LeftOut:
    """What one run leaves out: markers, whole files or directories, single tests."""

    markers: frozenset[str]
    paths: frozenset[str]
    tests: frozenset[str]


def load(run: str, path: Path = LIST) -> LeftOut:
    """The list as ``run`` reads it; a malformed list fails naming the file and the key."""
    if run not in RUNS:
        raise ValueError(f"--left-out={run}: not one of {', '.join(RUNS)}")
    spec = json.loads(path.read_text())
    for key in ("markers", "root", "flake", "fast"):
        if not isinstance(spec.get(key), dict) or not all(
            isinstance(why, str) and why for why in spec[key].values()
        ):
            raise ValueError(f"{path}: {key!r} must map each entry to the reason it is left out")
    own = spec[OWN[run]] if OWN[run] else {}
    return LeftOut(
        markers=frozenset(spec["markers"]),
        paths=frozenset(entry for entry in own if "::" not in entry),
        tests=frozenset(spec["root"]) | {entry for entry in own if "::" in entry},
    )


def stale(left_out: LeftOut, root: Path) -> list[str]:
    """Entries that name nothing any more: a missing path, or a test its file no longer defines
    (as a function, or as a name bound at the top, like a state machine's ``TestCase``)."""
    gone = [path for path in sorted(left_out.paths) if not (root / path).exists()]
    for node in sorted(left_out.tests):
        path, _, name = node.partition("::")
        file = root / path
        text = file.read_text() if file.is_file() else ""
        if f"def {name}(" not in text and f"\n{name} = " not in text:
            gone.append(node)
    return gone


def names(node: str, tests: frozenset[str]) -> bool:
    """Whether a listed test names this item: itself, any of its parameters, or the methods of
    the class it is (``test_flow::runTest``)."""
    return node in tests or any(node.startswith(test + mark)
                                for test in tests for mark in ("[", "::"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--left-out", choices=RUNS, default=None,
        help="leave out what tests/left-out.json lists for this run (make gate, the flake "
             "check, scripts/test --fast)",
    )  # fmt: skip


def _left_out(config: pytest.Config) -> LeftOut | None:
    run = config.getoption("--left-out")
    return None if run is None else load(run)


def pytest_configure(config: pytest.Config) -> None:
    left_out = _left_out(config)
    if left_out is None:
        return
    declared = {line.split(":")[0].split("(")[0] for line in config.getini("markers")}
    unknown = left_out.markers - declared
    gone = stale(left_out, config.rootpath) + sorted(unknown)
    if gone:
        raise pytest.UsageError(f"{LIST.name} names what no longer exists: {', '.join(gone)}")
    config.stash[_KEY] = left_out


_KEY = pytest.StashKey[LeftOut]()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    left_out = config.stash.get(_KEY, None)
    if left_out is None:
        return None
    relative = collection_path.relative_to(config.rootpath).as_posix() \
        if collection_path.is_relative_to(config.rootpath) else None
    return True if relative in left_out.paths else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    left_out = config.stash.get(_KEY, None)
    if left_out is None:
        return
    kept, dropped = [], []
    for item in items:
        marked = any(item.get_closest_marker(name) for name in left_out.markers)
        (dropped if marked or names(item.nodeid, left_out.tests) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
