"""`make gate` runs offline, and it and the flake's check leave out one list (tests/left-out.json).

The proof runs the gate's own collection (``make gate-collect``: uv, pytest and every test
module imported, with the gate's selection) in a network namespace with only loopback: the
step that would reach an index or a download if anything did. The tests it selects run in
scripts/test anyway, so running them a second time here would double their time for no new
claim; the whole gate under ``scripts/offline`` is ``make offline-gate``, measured in
docs/decisions/offline-gate.md.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from support.left_out import LIST, RUNS, LeftOut, load, names, stale
from support.requires import needs

REPO = Path(__file__).resolve().parents[1]
MODULE_MARK = re.compile(r"^pytestmark = .*pytest\.mark\.(\w+)", re.MULTILINE)


def module_markers(path: Path) -> set[str]:
    """The markers a test module puts on all its tests (its ``pytestmark`` line)."""
    return set(MODULE_MARK.findall(path.read_text()))


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
@needs("unshare", "ip")
def test_the_gate_runs_with_no_network():
    done = subprocess.run(
        ["scripts/offline", "make", "--no-print-directory", "gate-collect"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    files = {node.split("::")[0] for node in collected}
    left_out = load("gate")
    # The repository's gates are in the gate; nothing it must leave out is.
    assert "tests/test_gates.py" in files
    assert not left_out.tests & set(collected)
    for file in files:
        assert not module_markers(REPO / file) & left_out.markers, file
    selected = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", done.stdout)
    assert selected, done.stdout[-500:]
    assert int(selected[1]) == len(collected) > 0


def test_a_listed_path_or_test_that_is_gone_is_named():
    """--ignore and --deselect of a path that is gone are silent; the list is not."""
    gone = LeftOut(markers=frozenset(), paths=frozenset({"tests/no_such_dir", "tests/gateway"}),
                   tests=frozenset({"tests/test_gate.py::test_renamed_away",
                                    "tests/test_gate.py::test_a_listed_path_or_test_that_is_gone_is_named"}))
    assert stale(gone, REPO) == ["tests/no_such_dir", "tests/test_gate.py::test_renamed_away"]
    for run in RUNS:
        assert stale(load(run), REPO) == []


def test_an_entry_without_its_reason_is_refused(tmp_path):
    spec = json.loads(LIST.read_text())
    spec["root"]["tests/bxcore/test_daemon.py::test_x"] = ""
    broken = tmp_path / "left-out.json"
    broken.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="'root' must map each entry to the reason"):
        load("gate", broken)


def test_the_gate_and_the_flake_check_read_the_one_list():
    """Neither names a test, a path or a marker of its own: each passes only its run's name."""
    checks = (REPO / "nix" / "checks.nix").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "--left-out=flake" in checks and "--left-out=gate" in makefile
    for text in (checks, makefile):
        assert not re.search(r"--ignore|--deselect|-m [\"']|real_server", text)
    gate, flake = load("gate"), load("flake")
    assert gate.markers == flake.markers and gate.tests == flake.tests
    assert not gate.paths and flake.paths


def test_the_fast_run_leaves_out_what_the_gate_does_and_more():
    """scripts/test --fast is the gate's selection minus its own list: nothing that needs a model
    server, a sandbox or root comes back in."""
    gate, fast = load("gate"), load("fast")
    assert fast.markers == gate.markers and fast.tests > gate.tests and fast.paths
    assert "--left-out=fast" in (REPO / "scripts" / "test").read_text()


@pytest.mark.parametrize(("node", "named"), [
    ("tests/a.py::test_x", True), ("tests/a.py::test_x[case-1]", True),
    ("tests/a.py::test_x::runTest", True), ("tests/a.py::test_xy", False),
    ("tests/a.py::test_y[test_x]", False),
])
def test_a_listed_test_names_its_parameters_and_methods_and_nothing_else(node, named):
    assert names(node, frozenset({"tests/a.py::test_x"})) is named


def test_the_pre_commit_hooks_are_local_and_the_gates_own_commands():
    """No hook repository is fetched: every hook is local and runs the project's locked tools.
    At commit they are what `make gate` runs for lint, contracts and types; the fast tier runs
    at push, or by hand."""
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    assert all(hook["language"] == "system" for hook in hooks)
    makefile = (REPO / "Makefile").read_text()
    at_commit = [hook["entry"] for hook in hooks if "stages" not in hook]
    for target, tool in (("lint", "ruff check"), ("contracts", "lint-imports"), ("types", "mypy")):
        assert re.search(rf"^{target}:\n\t\$\(UV\) {tool}", makefile, re.MULTILINE), target
        assert any(entry.startswith(f"uv run --frozen {tool}") for entry in at_commit), tool
    (fast,) = [hook for hook in hooks if "stages" in hook]
    assert fast["entry"] == "scripts/test --fast"
    assert set(fast["stages"]) == {"pre-push", "manual"} and not fast["pass_filenames"]
    assert config["default_stages"] == ["pre-commit"]
