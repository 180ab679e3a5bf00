"""How a tool call is shown to the owner who approves it: one rendering, used by ``bxctl
approvals`` and by gatewayd's Mattermost approval post (pure).

The owner must see what will run, not what the text pretends to be. So:

- the fields that decide what a call does (``argv``, ``command``, ``path``, ``url``, ``cwd``,
  ``question``) come first, each on its own lines, then every other field by name;
- a long value is wrapped at ``width`` characters, never cut: each piece on its own line;
  a value's own line breaks start new lines, marked ``↵`` where they were;
- every character that renders as nothing, reorders text or is not what it looks like
  (control and format characters, bidi overrides and isolates, zero-width characters,
  non-ASCII spaces, private use and unassigned code points; in a URL any non-ASCII
  character, the look-alike host's ingredient) is written as ``⟨U+202E⟩``, and a warning line
  above the call counts them.

Nothing is left out: a field that is not a string is shown as canonical JSON, and arguments that
are not a JSON object are shown whole, made visible the same way.

How long a call has been running or waiting is shown one way too, in every channel
(``format_elapsed``).
"""

from __future__ import annotations

import json

from .canonical import canonical_text
from .visible import visible

KEY_FIELDS = ("argv", "command", "path", "url", "cwd", "question")
WIDTH = 72
INDENT = "    "
BREAK = "↵"


def describe_call(tool: str, arguments: str, *, width: int = WIDTH) -> str:
    """The call as the owner reads it: the tool, then its fields, made visible and wrapped."""
    lines: list[str] = []
    hidden = 0
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        ordered = [k for k in KEY_FIELDS if k in value] + sorted(k for k in value
                                                                  if k not in KEY_FIELDS)
        for key in ordered:
            shown_key, n_key = visible(str(key))
            text, n_value = visible(_as_text(value[key]), url=key == "url")
            hidden += n_key + n_value
            lines.append(f"{shown_key}:")
            lines.extend(INDENT + piece for piece in _wrap(text, width))
        if not value:
            lines.append("(no arguments)")
    else:
        text, hidden = visible(arguments)
        lines.append("arguments (not a JSON object):")
        lines.extend(INDENT + piece for piece in _wrap(text, width))
    shown_tool, n_tool = visible(tool)
    hidden += n_tool
    head = [f"tool: {shown_tool}"]
    if hidden:
        head.insert(0, f"WARNING: {hidden} invisible, direction-changing or look-alike "
                       "character(s), shown as ⟨U+....⟩")
    return "\n".join(head + lines)


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return canonical_text(value)
    except (ValueError, TypeError, RecursionError):
        return repr(value)


def _wrap(text: str, width: int) -> list[str]:
    """Each line of ``text`` in pieces of at most ``width`` characters; a line that ended in a
    line break is marked, and a tab is shown as ``⟨TAB⟩`` so the columns stay honest."""
    pieces: list[str] = []
    lines = text.replace("\t", "⟨TAB⟩").split("\n")
    for number, line in enumerate(lines):
        mark = BREAK if number < len(lines) - 1 else ""
        chunks = [line[i:i + width] for i in range(0, len(line), width)] or [""]
        chunks[-1] += mark
        pieces.extend(chunks)
    return pieces


def format_elapsed(seconds: int) -> str:
    """How long something has taken, as the channels show it: ``45 s``, ``2 min 5 s``,
    ``1 h 3 min``."""
    minutes, secs = divmod(max(0, seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


__all__ = ["KEY_FIELDS", "describe_call", "format_elapsed", "visible"]
