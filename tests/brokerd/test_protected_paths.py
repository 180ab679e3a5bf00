"""Grants never reach the harness's own directories (``policy._protected.reaching``, pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from brokerd.policy import parse_grant
from brokerd.policy._protected import Protected, reaching

HOME = Path("/home/o")
HARNESS = (Protected(path="/home/o/.local/state/boxmaker", what="the state directory"),
           Protected(path="/run/boxmaker", what="the sockets' directory"))


def grant(sandbox: str = "", arguments: str = "") -> str:
    return (f'tools = ["fs.read"]\nmode = "auto"\nclasses = ["private"]\n{arguments}\n'
            f"[sandbox]\n{sandbox}\n")


def parsed(text: str):
    return parse_grant(text, "g.toml", home=HOME, resolve=lambda path: path)


@pytest.mark.parametrize(("text", "says"), [
    (grant('mounts = [{ path = "~" }]'), "sandbox.mounts.0.path (/home/o"),  # above
    (grant('mounts = [{ path = "/run/boxmaker" }]'), "the sockets' directory"),  # the same
    (grant('mounts = [{ path = "/home/o/.local/state/boxmaker/audit" }]'), "state"),  # inside
    (grant(arguments='[arguments.path]\npaths = ["/**"]'), "arguments.path.paths.0 (/**)"),
    (grant(arguments='[arguments.path]\npaths = ["~/.local/*/boxmaker/x"]'), "state"),
])
def test_a_grant_reaching_the_harness_is_named(text, says):
    why = reaching(parsed(text), HARNESS)
    assert why is not None and says in why


@pytest.mark.parametrize("text", [
    grant('mounts = [{ path = "~/notes" }]'),
    grant('mounts = [{ path = "/run/boxmaker-other" }]'),  # a sibling, not the directory
    grant(arguments='[arguments.path]\npaths = ["~/notes/**/*.md"]'),
])
def test_a_grant_beside_the_harness_is_fine(text):
    assert reaching(parsed(text), HARNESS) is None
