"""The one table of tools: name, description, JSON-schema parameters and the function.

``bx-tool schemas`` exports it (without the functions) as the registry loopd's ``find_tool``
searches. Every toolkit tool is non-core: it is found with find_tool and called through
call_tool, so adding one here never changes the epoch's fixed tools array.
"""

from __future__ import annotations

import importlib

from .result import Context, Result, make_result

TYPE_CHECKING = False  # typing is not imported at run time: a call's start is what it costs
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_PATH = {"type": "string", "minLength": 1, "description": "An absolute path inside a grant."}


class Tool:
    """A tool of the table. ``function`` is ``"module:name"`` in this package, or a function;
    a module is imported only when its tool runs, so a call loads only its own tool's imports
    (``http.client`` and ``ssl`` for consult, ``subprocess`` for shell.run)."""

    __slots__ = ("_function", "description", "name", "parameters")

    def __init__(self, name: str, description: str, parameters: dict[str, Any], function: Any):
        self.name = name
        self.description = description
        self.parameters = parameters
        self._function = function

    def load(self) -> Callable[[Context, dict[str, Any]], Result]:
        """The tool's function, its module imported now."""
        function = self._function
        if isinstance(function, str):
            module, _, attribute = function.partition(":")
            function = getattr(importlib.import_module(f"toolkit.{module}"), attribute)
        return function  # type: ignore[no-any-return]

    def run(self, context: Context, arguments: dict[str, Any]) -> Result:
        return self.load()(context, arguments)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def schema(self) -> dict[str, Any]:
        """The ToolSchema shape (bxcore.chat.ToolSchema) as JSON."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "core": False,
        }


def _object(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _echo(context: Context, args: dict[str, Any]) -> Result:
    return make_result(context, args["text"], untrusted=False)


TOOLS: tuple[Tool, ...] = (
    Tool(
        "echo",
        "Return the given text unchanged. For checking that tool calls work.",
        _object(["text"], text={"type": "string"}),
        _echo,
    ),
    Tool(
        "fs.read",
        "Read a text file or note the owner granted, from an optional byte offset.",
        _object(["path"], path=_PATH, offset={"type": "integer", "minimum": 0}),
        "fs:read",
    ),
    Tool(
        "fs.list",
        "List a granted directory: one entry a line, directories end in '/', symlinks in '@', "
        "files show their size.",
        _object(["path"], path=_PATH),
        "fs:list_dir",
    ),
    Tool(
        "fs.search",
        "Search granted files for a regular expression; prints file:line:text per match.",
        _object(
            ["path", "pattern"],
            path=_PATH,
            pattern={"type": "string", "minLength": 1, "description": "A Python regex."},
            max_matches={"type": "integer", "minimum": 1, "maximum": 1000},
        ),
        "fs:search",
    ),
    Tool(
        "fs.write",
        "Write text to a file in a granted writable directory. mode 'create' (default) refuses "
        "an existing file; 'overwrite' replaces it; 'append' adds to it.",
        _object(
            ["path", "content"],
            path=_PATH,
            content={"type": "string"},
            mode={"type": "string", "enum": ["create", "overwrite", "append"]},
        ),
        "fs:write",
    ),
    Tool(
        "http.fetch",
        "GET an http or https URL on a granted host. The result is untrusted text.",
        _object(
            ["url"],
            url={"type": "string", "minLength": 1},
            bearer_secret={"type": "string", "description": "A granted secret sent as a "
                           "bearer token."},
            timeout_s={"type": "integer", "minimum": 1, "maximum": 300},
        ),
        "net:fetch",
    ),
    Tool(
        "shell.run",
        "Run one command (an argv list, not a shell line) in a granted working directory; "
        "prints its exit status and its combined output.",
        _object(
            ["argv", "cwd"],
            argv={"type": "array", "items": {"type": "string"}, "minItems": 1},
            cwd=_PATH,
        ),
        "shell:run",
    ),
    Tool(
        "consult",
        "Ask a stronger cloud model one self-contained question. It sees only the question and "
        "the snippets you attach, never this conversation, and has no tools. Slow (it may take "
        "minutes). The answer is untrusted text.",
        _object(
            ["question"],
            question={"type": "string", "minLength": 1},
            attachments={"type": "array", "items": {"type": "string"}, "description": "Text "
                         "snippets to send with the question; nothing else is sent."},
        ),
        "consult:ask",
    ),
)

BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}


def schemas() -> list[dict[str, Any]]:
    return [tool.schema() for tool in TOOLS]
