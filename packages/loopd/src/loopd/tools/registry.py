"""The registry: every tool loopd can offer, each a ``ToolSchema`` with a ``core`` flag.

Core tools have their schema in the epoch's fixed ``tools`` array, together with loopd's own
``find_tool`` and ``call_tool``; every other tool is found with ``find_tool`` and reached through
``call_tool`` (docs/design.md, "Progressive disclosure": the tools array is fixed for an epoch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from bxcore.canonical import canonical_text
from bxcore.chat import ToolSchema
from bxcore.frames import describe_validation
from bxcore.memory_tool import MEMORY_TOOL_SCHEMAS
from bxcore.tools import CLOCK
from pydantic import TypeAdapter, ValidationError

from ..errors import RegistryError

FIND_TOOL = ToolSchema(
    name="find_tool",
    description=(
        "Search the tools that are not in this list, by words of their name or description. "
        "Returns the schemas of the tools that match."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "A word to look for."}},
        "required": ["query"],
    },
    core=True,
)
CALL_TOOL = ToolSchema(
    name="call_tool",
    description="Call a tool that find_tool found, by its name, with its arguments.",
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The tool's name."},
            "arguments": {"type": "object", "description": "The tool's arguments."},
        },
        "required": ["name", "arguments"],
    },
    core=True,
)
LOOP_TOOLS = (FIND_TOOL, CALL_TOOL)
FOUND_SUFFIX = "Call it with call_tool."
NOTHING_FOUND = "No tool matches."
# A search that found nothing, when there are tools to find, says that find_tool looks for what
# a tool does and names every tool it could have found, each with the first clause of its
# description. Asked about a note, a small model searches for the text it wants ("code word"):
# told to search again with one of these names, the 1.5B asked for "fs.read" and read the note;
# given the whole descriptions as lines instead, it answered the user with a line of the listing
# (docs/decisions/tool-discovery.md).
NOTHING_MATCHES = (
    "No tool matches {query}. find_tool finds tools by what they do, not the text you want. "
    "Call find_tool again with one of these tool names: {tools}."
)
UNKNOWN_TOOL = (
    "Unknown tool {name}{where}. Call find_tool with one of these tool names to get its "
    "arguments: {tools}."
)
QUOTED = 80  # characters of a model's own name or query that loopd's answers repeat
_FIRST_CLAUSE = re.compile(r"[.;:](?:\s|$)")
_WORD = re.compile(r"[^\W_]+")

_SCHEMAS = TypeAdapter(list[ToolSchema])


class Registry:
    """The tools a port answers. ``find_tool`` and ``call_tool`` are loopd's and never listed."""

    def __init__(self, schemas: Sequence[ToolSchema]):
        names = [schema.name for schema in schemas]
        taken = sorted({n for n in names if names.count(n) > 1} | ({*names} & _loop_names()))
        if taken:
            raise RegistryError(f"tool names listed twice or reserved by loopd: {taken}")
        self._schemas = {schema.name: schema for schema in schemas}

    def schemas(self) -> list[ToolSchema]:
        """Every tool of the registry, core or not, in the order given."""
        return list(self._schemas.values())

    def core_schemas(self) -> list[ToolSchema]:
        """The epoch's tools array: the core tools of the port, then find_tool and call_tool."""
        return [s for s in self._schemas.values() if s.core] + list(LOOP_TOOLS)

    def is_port_core(self, name: str) -> bool:
        schema = self._schemas.get(name)
        return schema is not None and schema.core

    def is_discoverable(self, name: str) -> bool:
        """In the registry and not core: what call_tool may reach."""
        schema = self._schemas.get(name)
        return schema is not None and not schema.core

    def _discoverable(self) -> list[ToolSchema]:
        return [s for s in self._schemas.values() if not s.core]

    def search(self, query: str) -> list[ToolSchema]:
        """Tools outside the tools array that match ``query``, ignoring case; the first of
        these that finds any:

        1. the tools whose name contains the query ("fs.read"; "fs" finds every fs tool);
        2. those whose name has the most of the query's words as parts ("read file": fs.read);
        3. those whose description's first clause, which says what the tool does, holds the
           most of the query's words, as whole words ("city" finds "Forecast for a city.";
           "ls" does not find "tool calls");
        4. the same over the whole description (the rest says how: "file" in "use it when a
           file is full" is no reason to offer ``memory`` for reading a file).

        A name is the closer match: "read" finds fs.read, not also every tool whose description
        mentions reading, which a small model then picks (docs/decisions/tool-discovery.md). Core
        tools are left out: the model has them already, and call_tool refuses them."""
        needle = query.casefold()
        others = self._discoverable()
        by_name = [s for s in others if needle in s.name.casefold()]
        words = _words(needle)
        return (by_name or _most_words(others, words, lambda s: s.name)
                or _most_words(others, words, lambda s: first_clause(s.description))
                or _most_words(others, words, lambda s: s.description))

    def unknown_tool_text(self, name: object, *, through_call_tool: bool) -> str:
        """What loopd answers for a tool it cannot run: a registry tool called on its own is
        pointed to call_tool; any other name gets the tools call_tool reaches, named, so a
        small model that made one up ("ls", "cat") has the real ones to pick from."""
        where = " for call_tool" if through_call_tool else ""
        if not through_call_tool and isinstance(name, str) and self.is_discoverable(name):
            return (f"Unknown tool {name!r} as a call of its own: call call_tool with the name "
                    f"{name!r} and its arguments.")
        if not self._discoverable():
            return f"Unknown tool {quoted(name)}{where}: there are no tools to call."
        return UNKNOWN_TOOL.format(name=quoted(name), where=where, tools=self.named_tools())

    def named_tools(self) -> str:
        """Every tool call_tool reaches, each named with the first clause of its description:
        what a miss of find_tool or call_tool gives a small model to go on."""
        return "; ".join(f"{s.name} ({first_clause(s.description)})"
                         for s in self._discoverable())

    def find_tool_text(self, query: str) -> str:
        """What ``find_tool`` answers: the schemas as JSON text and how to call them; when
        nothing matches, the query and every tool it could have found, named with the first
        clause of its description."""
        found = self.search(query)
        if not found:
            if not self._discoverable():
                return NOTHING_FOUND
            return NOTHING_MATCHES.format(query=quoted(query, _json_quote),
                                          tools=self.named_tools())
        listing = canonical_text(
            [{"name": s.name, "description": s.description, "parameters": s.parameters}
             for s in found]
        )
        return f"{listing}\n{FOUND_SUFFIX}"


def quoted(text: object, quote: Callable[[str], str] = repr) -> str:
    """A name or query the model chose, as loopd's own answers repeat it: quoted (``repr``, or
    ``json.dumps`` for a query) and cut to ``QUOTED`` characters, with its length when cut, so
    a model's long text is never echoed back whole into its context. Never canonical_text: it
    may hold a lone surrogate, which loopd escapes when it carries the result."""
    shown = text if isinstance(text, str) else repr(text)
    if len(shown) <= QUOTED:
        return quote(text) if isinstance(text, str) else shown
    return f"{quote(shown[:QUOTED])}... ({len(shown):,} characters)"


def _json_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _most_words(
    schemas: Sequence[ToolSchema], words: set[str], field: Callable[[ToolSchema], str]
) -> list[ToolSchema]:
    """The schemas whose ``field`` shares the most of ``words`` (none if no schema shares one)."""
    shared = [len(words & _words(field(s).casefold())) for s in schemas]
    best = max(shared, default=0)
    return [s for s, n in zip(schemas, shared, strict=True) if best and n == best]


def _words(text: str) -> set[str]:
    """The words of casefolded text of three letters or more, a final "s" dropped so "files"
    meets "file"; a tool name's parts are words too ("fs.read": read). Shorter ones match too
    much to mean anything: the "md" of a path the model searched for found the tool whose
    description names memory.md."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w
            for w in _WORD.findall(text) if len(w) >= 3}


def first_clause(description: str) -> str:
    """A description up to its first full stop, semicolon or colon that ends a clause (one
    followed by a space or the end: "fs.read" and "memory.md" do not end one)."""
    return _FIRST_CLAUSE.split(description, maxsplit=1)[0].strip()


def load_registry(path: Path) -> Registry:
    """A JSON array of ToolSchema objects (the toolkit publishes it); errors name the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        schemas = _SCHEMAS.validate_json(data)
    except ValidationError as exc:
        raise RegistryError(f"{path}: {describe_validation(exc)}") from None
    try:
        return Registry(schemas)
    except RegistryError as exc:
        raise RegistryError(f"{path}: {exc}") from None


def with_memory_tools(registry: Registry) -> Registry:
    """The registry plus memoryd's ``recall``, ``ask_memory`` and ``memory``, their schemas from
    bxcore (a registry file's own entries for those names are replaced). They are not core, so
    find_tool finds them and call_tool reaches them through the port, i.e. brokerd, like any
    tool; a registry file may still list one with ``core: true`` to put it in the tools array."""
    return with_builtin(registry, MEMORY_TOOL_SCHEMAS)


def with_builtin(registry: Registry, schemas: Sequence[ToolSchema]) -> Registry:
    """The registry plus tools whose schemas bxcore fixes (the memory tools, ``delegate``),
    replacing a registry file's own entries for those names but keeping their ``core`` flag."""
    names = {schema.name for schema in schemas}
    listed = registry.schemas()
    core = {s.name: s.core for s in listed if s.name in names}
    fixed = [s.model_copy(update={"core": core.get(s.name, False)}) for s in schemas]
    return Registry([*(s for s in listed if s.name not in names), *fixed])


def with_clock(registry: Registry) -> Registry:
    """The registry with ``clock`` first, core, from bxcore (a registry file's own ``clock``
    entry is replaced): the tools array holds it in every configuration (docs/design.md,
    "Core tools"), and brokerd answers it by built-in policy."""
    return Registry([CLOCK, *(s for s in registry.schemas() if s.name != CLOCK.name)])


def _loop_names() -> set[str]:
    return {schema.name for schema in LOOP_TOOLS}

