"""A local stack's config.toml from before ``[paths] protected`` existed gets it at the next
``bxctl up`` (``stack.local.protecting_state``): without it, a grant could reach the stack's own
directory (this file, the logs, the serving settings, stack.json). The owner's config is
otherwise kept as written.

Generated configs: the one ``bxctl up`` writes, without its protected line, with the owner's
edits (comments and keys in [paths], a spaced or commented header, other tables before it).
The properties, judged by TOML's own parser: the upgrade names the stack's directory, changes no
other value, and is done once (a second upgrade changes nothing); a config that names its own
protected paths, whatever they are, is left alone; one with no [paths] table is refused naming
the file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from bxctl.stack.local import StackError, StackLayout, protecting_state, render_config
from hypothesis import given
from hypothesis import strategies as st

LAYOUT = StackLayout(state=Path("/home/o/.local/state/boxmaker"))
WRITTEN = render_config(LAYOUT, grants=Path("/home/o/grants"), registry=Path("/r.json"),
                        model="qwen", backend="bubblewrap")
OLD = "\n".join(line for line in WRITTEN.splitlines() if not line.startswith("protected ="))

headers = st.sampled_from(["[paths]", " [paths]", "[ paths ]", "[paths]  # where things are"])
owner_lines = st.lists(st.sampled_from(["# my note", "", 'extra = "kept"']), max_size=3,
                       unique=True)
# What an owner may have put first: nothing, a comment, a table of their own before [paths].
before = st.sampled_from(["", "# my stack\n", '[memory]\nceiling = "secret"\n\n'])


def old_config(header: str, lines: list[str], first: str) -> str:
    return first + OLD.replace("[paths]", "\n".join([header, *lines]), 1)


@given(headers, owner_lines, before)
def test_an_old_config_gets_the_stacks_directory_protected_and_nothing_else_changes(
        header, lines, first):
    text = old_config(header, lines, first)
    assert "protected" not in tomllib.loads(text)["paths"]
    upgraded = protecting_state(text, LAYOUT)
    parsed, was = tomllib.loads(upgraded), tomllib.loads(text)
    assert parsed["paths"].pop("protected") == [str(LAYOUT.state)]
    assert parsed == was
    assert protecting_state(upgraded, LAYOUT) == upgraded


@given(st.lists(st.sampled_from(["/srv/a", "/home/o/x", str(LAYOUT.state)]), max_size=3))
def test_a_config_that_names_its_protected_paths_is_left_as_the_owner_wrote_it(paths):
    text = WRITTEN.replace(f'protected = ["{LAYOUT.state}"]',
                           "protected = [" + ", ".join(f'"{p}"' for p in paths) + "]")
    assert protecting_state(text, LAYOUT) == text


def test_a_config_with_no_paths_table_is_refused_naming_the_file():
    dotted = OLD.replace("[paths]\nhome =", "paths.home =").replace("\nrun =", "\npaths.run =", 1)
    with pytest.raises(StackError, match=r"config\.toml.*\[paths\]"):
        protecting_state(dotted, LAYOUT)
