"""``bx-tool``: run one tool and print exactly one JSON object, or export the schemas.

The call's context (data class, granted roots, content cap, proxy socket) comes as options from
brokerd, never from the environment; the tool's JSON arguments come as the last argument or,
when it is absent, on stdin.
"""

from __future__ import annotations

import json
import os
import re
import sys

from ._validate import validate
from .beneath import Opened
from .result import DATA_CLASSES, Context, ToolError, UsageError
from .table import BY_NAME, schemas

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_CAP = 16 * 1024
MAX_ARGUMENTS = 1024 * 1024
EXIT_OUT_OF_MEMORY = 3


# The options brokerd passes (``_call.toolkit_args``): each takes one value; ``--root``,
# ``--pinned``, ``--glob`` and ``--descend`` may repeat. ``--beneath``, ``--relative``,
# ``--host-path``, ``--glob`` and ``--descend`` say where the path a file tool opens is
# (``beneath.Opened``).
# Parsed by hand, not with argparse: argparse, with the gettext, shutil and locale it loads,
# was a third of the program's start (``python -X importtime``).
_OPTIONS = {"--class": "data_class", "--root": "root", "--cap": "cap",
            "--proxy-socket": "proxy_socket", "--settings": "settings", "--workdir": "workdir",
            "--out": "out", "--beneath": "beneath", "--relative": "relative",
            "--host-path": "host_path", "--glob": "glob", "--descend": "descend",
            "--pinned": "pinned", "--lifeline": "lifeline"}  # fmt: skip


class _Options:
    def __init__(self) -> None:
        self.name = ""
        self.arguments: str | None = None
        self.data_class = "secret"
        self.root: list[str] = []
        self.pinned: list[str] = []
        self.lifeline: str | None = None
        self.cap = DEFAULT_CAP
        self.proxy_socket: str | None = None
        self.settings: str | None = None
        self.workdir: str | None = None
        self.out: str | None = None
        self.beneath: str | None = None
        self.relative = ""
        self.host_path = ""
        self.glob: list[str] = []
        self.descend: list[str] = []


def _parse(argv: list[str]) -> _Options:
    """``NAME [ARGUMENTS]`` with the options anywhere among them; ``--opt value`` or
    ``--opt=value``; everything after ``--`` is positional."""
    options = _Options()
    positional: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--":
            positional.extend(items)
            break
        if not item.startswith("-") or item == "-":
            positional.append(item)
            continue
        flag, equals, value = item.partition("=")
        field = _OPTIONS.get(flag)
        if field is None:
            raise UsageError(f"bx-tool: unrecognized option {flag!r}")
        if not equals:
            value = next(items, None)  # type: ignore[assignment]
            if value is None:
                raise UsageError(f"bx-tool: option {flag}: expected one argument")
        if field in ("root", "pinned", "glob", "descend"):
            getattr(options, field).append(value)
        elif field == "cap":
            try:
                options.cap = int(value)
            except ValueError:
                raise UsageError(f"bx-tool: option --cap: not an integer: {value!r}") from None
        elif field == "data_class" and value not in DATA_CLASSES:
            raise UsageError(f"bx-tool: option --class: {value!r} is not one of "
                             f"{', '.join(DATA_CLASSES)}")
        else:
            setattr(options, field, value)
    if not positional:
        raise UsageError("bx-tool: a tool name is required")
    if len(positional) > 2:
        raise UsageError(f"bx-tool: unexpected arguments: {' '.join(positional[2:])}")
    options.name = positional[0]
    options.arguments = positional[1] if len(positional) == 2 else None
    return options


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except ToolError as exc:
        return _emit({"error": str(exc), "kind": exc.kind}, exc.exit_status)
    except MemoryError:
        return _emit({"error": "out of memory", "kind": "oom"}, EXIT_OUT_OF_MEMORY)


def _run(argv: list[str]) -> int:
    options = _parse(argv)
    if options.lifeline is not None:  # before anything is read, loaded or run
        _check_lifeline(options.lifeline)
    _check_pins(options.pinned)
    if options.name == "schemas":
        return _export_schemas(options.out)
    tool = BY_NAME.get(options.name)
    if tool is None:
        raise UsageError(f"no tool named {options.name!r}; known: {', '.join(sorted(BY_NAME))}")
    if options.cap < 1:
        raise UsageError("--cap must be positive")
    run = tool.load()  # this tool's module only: a call loads what it uses
    if options.proxy_socket:
        from .bridge import start_bridge  # socket and threading only for calls with egress

        start_bridge(options.proxy_socket)
    if options.workdir:
        # Only now: the interpreter started in / with -P, and every module is loaded.
        os.chdir(options.workdir)
    arguments = _arguments(options.arguments)
    validate(arguments, tool.parameters)
    context = Context(
        data_class=options.data_class,
        roots=tuple(options.root),
        cap=options.cap,
        egress=bool(options.proxy_socket),
        settings=_settings(options.settings),
        opened=_opened(options),
    )
    return _emit(run(context, arguments).as_json(), 0)


def _check_lifeline(text: str) -> None:
    """``--lifeline=FD``: the read end of a pipe whose write end brokerd alone holds
    (``sandbox.bubblewrap``). brokerd writes its go once it holds this sandbox's PID 1, so that
    the call ends only when every process started here is gone; it closes the pipe when the
    call ends. End of file before the go: the call was over (its time ran out, or brokerd
    stopped) before this sandbox was set up, and bwrap, which ties a sandbox to its own life
    only then, could not end it. Nothing runs. Closed here, so no tool inherits it."""
    if not text.isdigit():
        raise UsageError(f"bx-tool: option --lifeline: not a descriptor: {text!r}")
    fd = int(text)
    try:
        word = os.read(fd, 1)
    except OSError as exc:
        raise UsageError(f"bx-tool: option --lifeline: descriptor {fd}: {exc}") from None
    os.close(fd)
    if word == b"":
        raise ToolError("Nothing ran: the call had ended (its time ran out, or brokerd "
                        "stopped) before its sandbox was ready")
    if word != b"\x01":
        raise UsageError(f"bx-tool: option --lifeline: {word!r} is not brokerd's go")


def _check_pins(pinned: list[str]) -> None:
    """Each ``--pinned=DEVICE:INODE:TARGET``: the directory mounted at TARGET must be the one
    brokerd opened for it (``_call.pin_mount``). A symlink swapped in on the host between
    brokerd's check and the sandbox's bind would have bound another: nothing runs then."""
    for pin in pinned:
        device, _, rest = pin.partition(":")
        inode, _, target = rest.partition(":")
        if not (device.isdigit() and inode.isdigit() and target):
            raise UsageError(f"bx-tool: option --pinned: not DEVICE:INODE:TARGET: {pin!r}")
        try:
            found = os.stat(target, follow_symlinks=False)
        except OSError as exc:
            raise ToolError(f"Nothing ran: the mount {target} cannot be read: "
                            f"{exc.strerror}") from None
        if (found.st_dev, found.st_ino) != (int(device), int(inode)):
            raise ToolError(f"Nothing ran: what is mounted at {target} is not what brokerd "
                            "checked (its source was swapped on the host while the sandbox was "
                            "made)")


def _arguments(text: str | None) -> Any:
    if text is None:
        text = sys.stdin.read(MAX_ARGUMENTS + 1)
        if len(text) > MAX_ARGUMENTS:
            raise UsageError(f"arguments: over {MAX_ARGUMENTS} characters")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"arguments: not JSON: {exc}") from None


def _opened(options: _Options) -> Opened | None:
    if options.beneath is None:
        return None
    try:
        globs = tuple(re.compile(glob, re.DOTALL) for glob in options.glob)
        descend = tuple(re.compile(regex, re.DOTALL) for regex in options.descend)
    except re.error as exc:
        raise UsageError(f"bx-tool: --glob or --descend: not a regular expression: {exc}"
                         ) from None
    return Opened(options.beneath, options.relative, options.host_path, globs, descend)


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
