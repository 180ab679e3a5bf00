"""Text made visible: every character that renders as nothing, reorders text or is not what it
looks like written as ``⟨U+XXXX⟩`` (pure). The owner reads tool calls to approve
(``bxcore.display``) and error messages (``bxcore.cli_errors``) through it; the sanitizer refuses
the same characters in memory text (``bxcore.sanitizer``).
"""

from __future__ import annotations

import unicodedata

_INVISIBLE_CATEGORIES = frozenset({"Cf", "Co", "Cn", "Zl", "Zp", "Cs"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e")


def is_invisible(char: str) -> bool:
    """A character that renders as nothing or changes how the text around it reads: controls
    (newline and tab included: callers that keep them check first), format characters (zero
    width, bidi), private use, unassigned, surrogates, separators, blank letters, variation
    selectors."""
    category = unicodedata.category(char)
    code = ord(char)
    return (category == "Cc" or category in _INVISIBLE_CATEGORIES or char in _BLANK_LETTERS
            or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF)


def visible(text: str, *, url: bool = False) -> tuple[str, int]:
    """``text`` with every character that does not show itself written as ``⟨U+XXXX⟩``, and
    how many there were: the invisible ones, non-ASCII spaces and, in a URL, any non-ASCII
    character (the look-alike host's ingredient). Newlines and tabs are kept (wrapping marks
    them); lone surrogates, which no channel can carry, are escaped too."""
    out: list[str] = []
    count = 0
    for char in text:
        if char in "\n\t " or not _hides(char, url):
            out.append(char)
        else:
            out.append(f"⟨U+{ord(char):04X}⟩")
            count += 1
    return "".join(out), count


def _hides(char: str, url: bool) -> bool:
    if url and ord(char) > 0x7E:
        return True
    return is_invisible(char) or unicodedata.category(char) == "Zs"


__all__ = ["is_invisible", "visible"]
