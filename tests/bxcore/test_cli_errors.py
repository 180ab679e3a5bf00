"""Errors mapped once for every command line (bxcore.cli_errors).

Properties, over every command of every console script the packages declare (found from their
pyproject.toml, so a new command or a new role is covered without editing this file):
- each command and group is built on the mapping;
- any Boxmaker error (bxcore's, every role's, bxctl's), with any message, raised by any command
  run through its real entry point, ends as ``Error: <message>`` on stderr, every character a
  terminal acts on made visible, with exit status 1;
- a bug (KeyError, LocalProtocolError, ...) raised the same way is not turned into a message:
  it reaches the caller as itself (Python prints its traceback).
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from bxcore import cli_errors
from bxcore.errors import BoxmakerError, LocalProtocolError
from bxcore.visible import visible
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
NOT_CLICK = {"bx-tool"}  # the toolkit: runs in sandboxes, imports nothing of the project


def _entry_points() -> dict[str, object]:
    found = {}
    for pyproject in sorted(REPO.glob("packages/*/pyproject.toml")):
        scripts = tomllib.loads(pyproject.read_text())["project"].get("scripts", {})
        for name, target in scripts.items():
            module, _, attribute = target.partition(":")
            found[name] = getattr(importlib.import_module(module), attribute)
    return found


ENTRY_POINTS = _entry_points()
ROOTS = {name: cli for name, cli in ENTRY_POINTS.items() if isinstance(cli, click.Command)}


def _walk(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...],
                                                                            click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _walk(sub, (*path, name))


COMMANDS = [(root, path, command) for root, cli in sorted(ROOTS.items())
            for path, command in _walk(cli, ())]
LEAVES = [(root, path) for root, path, command in COMMANDS if not isinstance(command, click.Group)]


def _subclasses(cls: type[BaseException]) -> Iterator[type[BaseException]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# Every role's errors are imported by now (the entry points import their packages).
DOMAIN_ERRORS = sorted({BoxmakerError, *_subclasses(BoxmakerError)}, key=lambda c: c.__qualname__)
BUGS = [KeyError, TypeError, AttributeError, AssertionError, LocalProtocolError, RuntimeError]


def _error(cls: type[BaseException], message: str) -> BaseException:
    """An instance with ``message`` as its text, whatever the class's constructor takes."""
    error = cls.__new__(cls)
    error.args = (message,)
    return error


def test_the_command_lines_are_the_roles_and_bxctl():
    assert set(ENTRY_POINTS) - set(ROOTS) == NOT_CLICK
    assert {"bxctl", "brokerd", "gatewayd", "inferproxy", "loopd", "memoryd"} <= set(ROOTS)
    assert len(LEAVES) > 30


@pytest.mark.parametrize(("root", "path", "command"), COMMANDS,
                         ids=[" ".join((r, *p)) for r, p, _ in COMMANDS])
def test_every_command_is_built_on_the_mapping(root, path, command):
    wanted = cli_errors.Group if isinstance(command, click.Group) else cli_errors.Command
    assert isinstance(command, wanted), f"{root} {' '.join(path)}: {type(command)}"


def _run(root: str, path: tuple[str, ...], raised: BaseException,
         monkeypatch: pytest.MonkeyPatch) -> click.testing.Result:
    """Run ``root path`` through its real entry point, with the command's callback raising
    ``raised``; its options and arguments, and the groups' own callbacks, are taken away."""
    command = ROOTS[root]
    monkeypatch.setattr(command, "callback", None)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
        if isinstance(command, click.Group):
            monkeypatch.setattr(command, "callback", None)

    def fail(**_: object) -> None:
        raise raised

    monkeypatch.setattr(command, "callback", fail)
    monkeypatch.setattr(command, "params", [])
    return CliRunner().invoke(ROOTS[root], list(path), prog_name=root)


@given(leaf=st.sampled_from(LEAVES), error=st.sampled_from(DOMAIN_ERRORS), message=st.text())
def test_a_boxmaker_error_is_the_owners_message_with_status_1(leaf, error, message):
    root, path = leaf
    with pytest.MonkeyPatch.context() as monkeypatch:
        result = _run(root, path, _error(error, message), monkeypatch)
    assert result.exit_code == cli_errors.USER_ERROR == 1
    assert result.stderr == f"Error: {visible(message)[0]}\n"
    assert isinstance(result.exception, SystemExit)


@given(leaf=st.sampled_from(LEAVES), bug=st.sampled_from(BUGS), message=st.text())
def test_a_bug_is_not_turned_into_a_message(leaf, bug, message):
    root, path = leaf
    raised = _error(bug, message)
    with pytest.MonkeyPatch.context() as monkeypatch:
        result = _run(root, path, raised, monkeypatch)
    assert result.exception is raised  # as itself: not a ClickException, not a SystemExit
    assert "Error:" not in result.stderr


def test_a_control_character_in_a_message_reaches_the_terminal_visible():
    with pytest.raises(click.ClickException) as caught, cli_errors.owner_errors():
        raise BoxmakerError("config.toml: key \x1b[2Jx")
    assert caught.value.format_message() == "config.toml: key ⟨U+001B⟩[2Jx"
