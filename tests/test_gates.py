"""The gates every change must pass, whatever area it touches.

- no function over 100 lines, no source file (.py, .nix) over 1,000 (docs/decisions/file-size.md);
- the import-linter contracts hold, and a violating import really makes them fail;
- every runtime package in uv.lock is justified in docs/dependencies.md (the brief's cargo-deny);
- no absolute path of a development machine in any file of the repository.

Files are those git would commit: tracked ones, plus new ones not ignored.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 1000  # a file this long holds more than one idea (docs/decisions/file-size.md)
MAX_FUNCTION_LINES = 100  # the unit that must read top to bottom in one sitting
ROLES = ["inferproxy", "loopd", "brokerd", "gatewayd", "memoryd", "bxctl", "toolkit"]


def repository_files(*patterns: str) -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--",
             *patterns],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"the gates need a git checkout and git on PATH: {exc}")
    paths = [ROOT / name for name in listed.decode().split("\0") if name]
    return [path for path in paths if path.is_file()]  # a deleted, uncommitted file is listed


# --- file size ---------------------------------------------------------------------------------


def test_no_source_file_is_over_1000_lines():
    sources = repository_files("*.py", "*.nix")
    assert any(p.name == "test_gates.py" for p in sources), "the file listing found no sources"
    too_long = {
        str(path.relative_to(ROOT)): count
        for path in sources
        if (count := len(path.read_bytes().splitlines())) > MAX_LINES
    }
    assert too_long == {}, f"split these files (limit {MAX_LINES} lines): {too_long}"


def long_functions(source: str) -> dict[str, int]:
    """Each function or method of ``source`` over MAX_FUNCTION_LINES lines (decorators and
    docstring included), by name, with its length."""
    return {node.name: length for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (length := node.end_lineno - min(
                [node.lineno, *(d.lineno for d in node.decorator_list)]) + 1)
            > MAX_FUNCTION_LINES}


def test_no_function_is_over_100_lines():
    too_long = {f"{path.relative_to(ROOT)}:{name}": count
                for path in repository_files("*.py")
                for name, count in long_functions(path.read_text(encoding="utf-8")).items()}
    assert too_long == {}, f"split these functions (limit {MAX_FUNCTION_LINES} lines): {too_long}"


@given(lines=st.integers(min_value=1, max_value=2 * MAX_FUNCTION_LINES),
       decorators=st.integers(min_value=0, max_value=3), nested=st.booleans(),
       is_async=st.booleans())
def test_a_function_is_too_long_exactly_when_its_lines_pass_the_cap(
        lines: int, decorators: int, nested: bool, is_async: bool):
    """Any function, method or nested function, with its decorators, is caught exactly when it
    is longer than the cap."""
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - decorators - 1)) or "    pass\n"
    function = "@staticmethod\n" * decorators + f"{'async ' if is_async else ''}def f():\n{body}"
    if nested:
        function = "class C:\n" + "".join(f"    {line}\n" for line in function.splitlines())
    length = max(decorators + 2, lines)
    assert long_functions(function) == ({"f": length} if length > MAX_FUNCTION_LINES else {})


# --- import contracts --------------------------------------------------------------------------


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)  # ahead of the editable installs in site-packages
    command = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(command), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout), result.stdout


def copy_of_the_packages(tmp_path: Path) -> Path:
    """Every package's source in one directory, to be put first on PYTHONPATH."""
    src = tmp_path / "src"
    for name in ["bxcore", *ROLES]:
        shutil.copytree(
            ROOT / "packages" / name / "src" / name, src / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return src


VIOLATIONS = {
    "a role imports another role": (
        "loopd", "import brokerd\n", "Roles are independent"),
    "bxcore imports a role": (
        "bxcore", "import loopd\n", "bxcore is the base"),
    "toolkit imports bxcore": (
        "toolkit", "from bxcore import canonical_json\n", "toolkit runs inside tool sandboxes"),
}


@pytest.mark.parametrize("case", VIOLATIONS, ids=VIOLATIONS.keys())
def test_a_violating_import_breaks_a_contract(tmp_path, case):
    package, source, contract = VIOLATIONS[case]
    src = copy_of_the_packages(tmp_path)
    (src / package / "_gate_probe.py").write_text(source)
    result = lint_imports(tmp_path, src)
    assert result.returncode != 0, result.stdout
    assert re.search(rf"{re.escape(contract)}.* BROKEN", result.stdout), result.stdout


def test_the_unchanged_copy_of_the_packages_passes(tmp_path):
    # The control for the test above: the copy itself breaks nothing.
    result = lint_imports(tmp_path, copy_of_the_packages(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


# --- dependencies (the brief's cargo-deny gate) ------------------------------------------------


def runtime_packages(lock: dict) -> dict[str, str]:
    """Each package the workspace members need at runtime, and who pulls it in.

    Walks the members' dependencies and optional dependencies, never the dev group. Packages are
    counted whatever their platform markers: a lock entry is something that could be installed.
    """
    packages = {p["name"]: p for p in lock["package"]}
    members = {n for n, p in packages.items() if {"editable", "virtual"} & set(p["source"])}
    needed: dict[str, str] = {}
    stack = [n for n in members if "editable" in packages[n]["source"]]
    while stack:
        name = stack.pop()
        entry = packages[name]
        deps = list(entry.get("dependencies", []))
        for extra in entry.get("optional-dependencies", {}).values():
            deps += extra
        for dep in deps:
            if dep["name"] not in needed and dep["name"] not in members:
                needed[dep["name"]] = name
                stack.append(dep["name"])
    return needed


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def justified_packages(markdown: str) -> tuple[set[str], set[str]]:
    """(runtime, dev-only) package names that have a heading and a non-empty paragraph.

    ``## name (who)`` is a runtime section; ``## Dev only: a, b (who)`` a dev-only one.
    """
    runtime: set[str] = set()
    dev: set[str] = set()
    sections = re.split(r"^## ", markdown, flags=re.MULTILINE)[1:]
    for section in sections:
        heading, _, body = section.partition("\n")
        if not body.strip():
            continue
        names_part = re.sub(r"\(.*\)", "", heading).replace("`", "").strip()
        target = runtime
        if names_part.lower().startswith("dev only:"):
            names_part, target = names_part[len("dev only:") :], dev
        for name in re.split(r",|\band\b", names_part):
            if name.strip():
                target.add(normalize(name.strip()))
    return runtime, dev


def test_runtime_packages_are_found_in_the_lock():
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    needed = runtime_packages(lock)
    assert "pydantic" in needed and "pydantic-core" in needed  # bxcore's, and its own
    assert "pytest" not in needed and "ruff" not in needed  # the dev group is not runtime


def unjustified(lock: dict, markdown: str) -> dict[str, str]:
    """Runtime packages without a runtime section in the docs, each with why it is there."""
    runtime, dev = justified_packages(markdown)
    return {
        name: f"pulled in by {via}" + (" (it has only a dev-only section)" if key in dev else "")
        for name, via in sorted(runtime_packages(lock).items())
        if (key := normalize(name)) not in runtime
    }


def test_every_runtime_package_in_the_lock_is_justified_in_docs():
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    missing = unjustified(lock, (ROOT / "docs" / "dependencies.md").read_text())
    assert missing == {}, (
        "add a '## <name> (<who uses it>)' section with the reason to docs/dependencies.md "
        f"for: {missing}"
    )


def test_the_dependency_gate_catches_unlisted_and_dev_only_packages():
    registry = {"registry": "https://pypi.org/simple"}
    lock = {"package": [
        {"name": "bxcore", "source": {"editable": "packages/bxcore"},
         "dependencies": [{"name": "Left_Pad"}]},
        {"name": "Left_Pad", "source": registry, "dependencies": [{"name": "tiny"}]},
        {"name": "tiny", "source": registry, "optional-dependencies": {"x": [{"name": "extra"}]}},
        {"name": "extra", "source": registry},
        {"name": "devtool", "source": registry},
    ]}
    docs = (
        "# Dependencies\n\n## `left-pad` (bxcore)\nPads.\n\n"
        "## Dev only: tiny, devtool (tests)\nSmall.\n\n## extra (tiny)\n\n"
    )
    assert unjustified(lock, docs) == {
        "extra": "pulled in by tiny",  # a heading without a reason does not count
        "tiny": "pulled in by Left_Pad (it has only a dev-only section)",
    }
    assert unjustified(lock, docs + "## tiny, extra (Left_Pad)\nNeeded.\n") == {}


# --- no machine paths --------------------------------------------------------------------------

# An absolute path starting at this machine's /work or /root (not ~/work/ or a/work/). Spelled
# in pieces so this file does not trip its own check.
MACHINE_PATHS = re.compile(r"(?<![\w~.])/" + "(?:work|root)" + "/")


def test_the_machine_path_pattern_matches_what_it_must():
    assert MACHINE_PATHS.search("see " + "/" + "work/main/x")
    assert MACHINE_PATHS.search("/" + "root/.cache")
    assert not MACHINE_PATHS.search("../shared/reference, /var/lib/boxmaker, ~/work/, a/root/")


def test_no_absolute_machine_path_in_the_repository():
    offenders = []
    for path in repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATHS.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert offenders == [], "use a path relative to the repository:\n" + "\n".join(offenders)
