"""bx-tool's contract: one JSON object on stdout and nothing else, arguments from argv or stdin,
clear usage errors, and the schema table exported for loopd's find_tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bxcore.chat import ToolSchema
from hypothesis import given
from hypothesis import strategies as st
from toolkit._validate import SUPPORTED, validate
from toolkit.result import UsageError, cap_text
from toolkit.table import TOOLS, schemas

SCHEMAS_FILE = Path(__file__).parents[2] / "packages" / "toolkit" / "tool-schemas.json"


def test_echo_from_argv_and_from_stdin(bx_tool):
    for stdin in (False, True):
        call = bx_tool("echo", {"text": "hi"}, "--class", "public", stdin=stdin)
        assert (call.status, call.document) == (
            0, {"class": "public", "content": "hi", "truncated": False, "untrusted": False}
        )


def test_a_lone_surrogate_still_prints_one_ascii_line(bx_tool):
    assert bx_tool("echo", {"text": "\ud800"}).content == "\ud800"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments: missing required field 'text'"),
        ({"text": 1}, "arguments.text: expected string, got integer"),
        ({"text": "x", "extra": 1}, "arguments: unknown field 'extra'"),
        ([], "arguments: expected object, got array"),
    ],
)
def test_arguments_that_do_not_fit_the_schema_are_usage_errors(bx_tool, arguments, message):
    call = bx_tool("echo", arguments)
    assert (call.status, call.document) == (2, {"error": message, "kind": "usage"})


def test_unknown_tool_and_bad_options_are_usage_errors(bx_tool):
    assert "no tool named 'nope'" in bx_tool("nope", {}).error
    assert bx_tool("echo", {"text": "x"}, "--class", "top-secret").status == 2
    assert bx_tool("echo", {"text": "x"}, "--cap", "0").status == 2


def test_arguments_that_are_not_json(capsys):
    from toolkit.main import main

    assert main(["echo", "{nope"]) == 2
    assert json.loads(capsys.readouterr().out)["error"].startswith("arguments: not JSON")


def test_the_console_script_runs_as_a_process():
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "echo", "--class", "public"],
        input='{"text": "out"}', capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0
    assert json.loads(done.stdout)["content"] == "out"
    assert done.stderr == ""


def test_every_schema_is_a_valid_non_core_tool_schema():
    for schema in schemas():
        parsed = ToolSchema.model_validate(schema)
        assert parsed.core is False


def test_the_table_uses_only_keywords_the_validator_checks():
    def walk(node: dict) -> None:
        assert set(node) <= SUPPORTED, set(node) - SUPPORTED
        for child in node.get("properties", {}).values():
            walk(child)
        if "items" in node:
            walk(node["items"])

    for tool in TOOLS:
        walk(tool.parameters)


def test_the_committed_schema_file_is_current():
    exported = json.dumps(schemas(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert SCHEMAS_FILE.read_text() == exported, "run: uv run bx-tool schemas --out " + str(
        SCHEMAS_FILE.relative_to(SCHEMAS_FILE.parents[2])
    )


def test_schemas_out_writes_the_file(tmp_path, capsys):
    from toolkit.main import main

    assert main(["schemas", "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == schemas()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=10,
)


@given(value=_json)
def test_validation_accepts_or_names_the_problem(value):
    for tool in TOOLS:
        try:
            validate(value, tool.parameters)
        except UsageError as exc:
            assert str(exc).startswith("arguments")


@given(text=st.text(), cap=st.integers(min_value=1, max_value=64))
def test_cap_text_never_splits_a_character_or_passes_the_cap(text, cap):
    cut, truncated = cap_text(text, cap)
    assert len(cut.encode("utf-8", errors="surrogatepass")) <= cap
    assert text.startswith(cut)
    assert truncated == (cut != text)
