"""The scripted-model stack with one fs.read grant over a granted tree: the rig most fault tests
share. ``granted/`` may be read (auto); ``outside/`` is named by no grant."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .httpserve import UnixHTTPServer
from .model import ScriptedModel
from .stack import ROLES, FaultStack


def grant(tools: list[str], mode: str, result_class: str, *, argument: tuple[str, str, str],
          sandbox: str, classes: tuple[str, ...] = ("public", "private"),
          allow_untrusted: bool = True) -> str:
    """A grant file: ``argument`` is (name, "paths", "hosts" or "pattern", what it allows);
    paths and hosts take a list, pattern one regular expression."""
    name, kind, allowed = argument
    value = json.dumps(allowed if kind == "pattern" else [allowed])
    return f"""tools = {json.dumps(tools)}
mode = "{mode}"
classes = {json.dumps(list(classes))}
allow_untrusted = {json.dumps(allow_untrusted)}
result_class = "{result_class}"
[arguments.{name}]
{kind} = {value}
[sandbox]
{sandbox}
"""


def read_grant(granted: Path) -> str:
    return grant(["fs.read", "fs.list"], "auto", "private",
                 argument=("path", "paths", f"{granted}/**"),
                 sandbox=f'mounts = [{{ path = "{granted}" }}]')


def directive(*calls: tuple[str, dict]) -> str:
    """A turn the obedient model obeys: ``DO [[name, arguments], ...]``."""
    return "DO " + json.dumps([[name, arguments] for name, arguments in calls])


def via_call_tool(name: str, arguments: dict) -> tuple[str, dict]:
    return ("call_tool", {"name": name, "arguments": arguments})


def tool_results(home: Path, session: str) -> list[dict]:
    """The tool_result records of a session's first log file, as written."""
    path = home / "sessions" / session / "0.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [row for row in rows if row["type"] == "tool_result"]


@dataclass
class Rig:
    root: Path
    model: ScriptedModel
    stack: FaultStack

    @property
    def granted(self) -> Path:
        return self.root / "granted"

    @property
    def outside(self) -> Path:
        return self.root / "outside"


@contextlib.contextmanager
def scripted_rig(root: Path, *, roles: tuple[str, ...] = ROLES, extra_config: str = "",
                 env: dict[str, str] | None = None, grants: dict[str, str] | None = None,
                 approval_timeout: float = 5.0, approvers: tuple[str, ...] = (),
                 tracer: Callable[[str], list[str]] | None = None) -> Iterator[Rig]:
    (root / "granted").mkdir()
    (root / "outside").mkdir()
    (root / "granted" / "a.txt").write_text("alpha\n")
    (root / "outside" / "secret.txt").write_text("outside the grants\n")
    model = ScriptedModel()
    with UnixHTTPServer(root / "model.sock", model.handle):
        stack = FaultStack(root, root / "model.sock", roles=roles, extra_config=extra_config,
                           env=env, approval_timeout=approval_timeout, approvers=approvers,
                           tracer=tracer)
        (stack.grants / "read.toml").write_text(read_grant(root / "granted"))
        for name, text in (grants or {}).items():
            (stack.grants / name).write_text(text)
        with stack:
            yield Rig(root=root, model=model, stack=stack)
