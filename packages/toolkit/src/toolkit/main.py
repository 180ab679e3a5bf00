"""``bx-tool``: run one tool and print exactly one JSON object, or export the schemas.

The call's context (data class, granted roots, content cap, proxy socket) comes as options from
brokerd, never from the environment; the tool's JSON arguments come as the last argument or,
when it is absent, on stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

from ._validate import validate
from .bridge import start_bridge
from .result import DATA_CLASSES, Context, ToolError, UsageError
from .table import BY_NAME, schemas

DEFAULT_CAP = 16 * 1024
MAX_ARGUMENTS = 1024 * 1024
EXIT_OUT_OF_MEMORY = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"bx-tool: {message}")


def _parser() -> _Parser:
    parser = _Parser(prog="bx-tool", add_help=False)
    parser.add_argument("name")
    parser.add_argument("--class", dest="data_class", choices=DATA_CLASSES, default="secret")
    parser.add_argument("--root", action="append", default=[])
    parser.add_argument("--cap", type=int, default=DEFAULT_CAP)
    parser.add_argument("--proxy-socket")
    parser.add_argument("--settings")
    parser.add_argument("--workdir")
    parser.add_argument("--out")
    parser.add_argument("arguments", nargs="?")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except ToolError as exc:
        return _emit({"error": str(exc), "kind": exc.kind}, exc.exit_status)
    except MemoryError:
        return _emit({"error": "out of memory", "kind": "oom"}, EXIT_OUT_OF_MEMORY)


def _run(argv: list[str]) -> int:
    options = _parser().parse_intermixed_args(argv)
    if options.name == "schemas":
        return _export_schemas(options.out)
    tool = BY_NAME.get(options.name)
    if tool is None:
        raise UsageError(f"no tool named {options.name!r}; known: {', '.join(sorted(BY_NAME))}")
    if options.cap < 1:
        raise UsageError("--cap must be positive")
    if options.workdir:
        # Only now: the interpreter started in / with -P, and every module is loaded.
        os.chdir(options.workdir)
    arguments = _arguments(options.arguments)
    validate(arguments, tool.parameters)
    if options.proxy_socket:
        start_bridge(options.proxy_socket)
    context = Context(
        data_class=options.data_class,
        roots=tuple(options.root),
        cap=options.cap,
        egress=bool(options.proxy_socket),
        settings=_settings(options.settings),
    )
    return _emit(tool.run(context, arguments).as_json(), 0)


def _arguments(text: str | None) -> Any:
    if text is None:
        text = sys.stdin.read(MAX_ARGUMENTS + 1)
        if len(text) > MAX_ARGUMENTS:
            raise UsageError(f"arguments: over {MAX_ARGUMENTS} characters")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"arguments: not JSON: {exc}") from None


def _settings(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--settings: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError("--settings: expected a JSON object")
    return value


def _export_schemas(out: str | None) -> int:
    text = json.dumps(schemas(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if out is None:
        sys.stdout.write(text)
        return 0
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(text)
    return 0


def _emit(document: dict[str, Any], status: int) -> int:
    # ASCII escapes: a lone surrogate in the arguments cannot break the one line we print.
    sys.stdout.write(json.dumps(document, sort_keys=True) + "\n")
    sys.stdout.flush()
    return status
