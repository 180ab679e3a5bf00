"""The token skeleton of a text: the sanitizer's normalising match for chat-template tokens (pure).

A list of spellings cannot keep up with ``<|im_<b></b>start|>``, ``< | im start | >`` split over
lines, ``<|im_start|>`` with a Cyrillic ``i`` and angle quotation marks for its brackets, or a
zero-width space inside ``<think>``. Instead the text is reduced to a skeleton and a few
canonical token shapes are matched there:

1. each character NFKC-normalised and case folded (full-width brackets and bars become ASCII);
2. look-alikes mapped to the ASCII they imitate (:data:`CONFUSABLES`: Cyrillic and Greek
   letters, angle brackets, vertical bars, slashes);
3. inline formatting markup removed (HTML ``<b>``, ``</em>``, ``<span ...>``, comments; the
   Markdown marks ``*``, `````, ``~``; backslash escapes);
4. every whitespace character and every invisible one (zero width, bidi, soft hyphen) removed.

Each skeleton character remembers the index of the original character it came from, so a
refusal still points into the text the writer gave.
"""

from __future__ import annotations

import re
import unicodedata

# Look-alikes of the characters chat-template tokens are made of, by the ASCII they imitate
# (Cyrillic, Greek, Latin small capitals; angle quotes, bars, slashes). NFKC already folds the
# full-width and compatibility forms; these are the ones it leaves alone.
_LOOKALIKES = {
    "/": "\u2215\u2044\u29f8",
    "<": "\u2039\u3008\u27e8\u276e\u02c2\u1438\u29fc\u300a\u00ab",
    "=": "\ua4ff\u1400",
    ">": "\u203a\u3009\u27e9\u276f\u02c3\u1433\u29fd\u300b\u00bb",
    "[": "\u27e6\u301a",
    "]": "\u27e7\u301b",
    "_": "\u2017",
    "a": "\u0430\u03b1\u1d00",
    "b": "\u0432\u03b2\u0299",
    "c": "\u0441\u03f2\u1d04",
    "d": "\u0501\u1d05",
    "e": "\u0435\u0451\u03b5\u1d07",
    "g": "\u0261\u0262",
    "h": "\u04bb\u043d\u029c",
    "i": "\u0456\u0457\u03b9\u026a\u0131",
    "j": "\u0458\u03f3\u1d0a\u0237",
    "k": "\u043a\u03ba\u1d0b",
    "l": "\u04cf\u029f",
    "m": "\u043c\u1d0d",
    "n": "\u03b7\u0274",
    "o": "\u043e\u03bf\u1d0f",
    "p": "\u0440\u03c1\u1d18",
    "q": "\u051b",
    "r": "\u0280",
    "s": "\u0455\ua731",
    "t": "\u0442\u03c4\u1d1b",
    "u": "\u03c5\u1d1c",
    "v": "\u03bd\u1d20",
    "w": "\u051d\u1d21",
    "x": "\u0445\u03c7",
    "y": "\u0443\u028f",
    "z": "\u1d22",
    "|": "\u01c0\u2223\u2502\u2503\u2758\u23d0\u00a6\uffe8\u2d4f",
}
CONFUSABLES = {char: ascii for ascii, chars in _LOOKALIKES.items() for char in chars}

_FORMATTING = re.compile(
    r"<!--.*?-->"
    r"|</?(?:b|i|u|em|strong|code|span|sub|sup|mark|small|big|tt|kbd|var|font|a|br|wbr|del|ins)"
    r"(?:\s[^<>]*)?/?>",
    re.DOTALL,
)
_MARKS = frozenset("*`~\\")

# The canonical shapes, matched on the skeleton (no spaces left in it).
TOKENS = re.compile(
    "|".join([
        r"<\|[a-z0-9_.\-]+\|>",  # ChatML, Llama 3, Harmony, Phi: <|im_start|> <|eot_id|> ...
        r"</?(?:think|thinking|tool_call|tool_calls|tool_response|start_of_turn|end_of_turn)>",
        r"<(?:function|parameter)=[a-z0-9_.\-]",  # Qwen XML tool calls
        r"\[/?inst\]",  # Mistral, Llama 2
        r"<</?sys>>",  # Llama 2
        r"\[/?(?:system_prompt|tool_calls|tool_results|available_tools)\]",  # Mistral v7
    ])
)


def _fold(char: str) -> str:
    out = []
    for piece in unicodedata.normalize("NFKC", char).casefold():
        out.append(CONFUSABLES.get(piece, piece))
    return "".join(out)


def _drops(char: str) -> bool:
    category = unicodedata.category(char)
    return char.isspace() or category in ("Cf", "Cc", "Zs", "Zl", "Zp", "Mn") or char in _MARKS


def skeleton(text: str) -> tuple[str, list[int]]:
    """The skeleton of ``text`` and, per skeleton character, its index in ``text``."""
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        for piece in _fold(char):
            folded.append(piece)
            origin.append(index)
    flat = "".join(folded)
    keep = [True] * len(flat)
    for match in _FORMATTING.finditer(flat):
        for i in range(match.start(), match.end()):
            keep[i] = False
    out: list[str] = []
    where: list[int] = []
    for i, char in enumerate(flat):
        if keep[i] and not _drops(char):
            out.append(char)
            where.append(origin[i])
    return "".join(out), where


def find_token(text: str) -> tuple[int, int] | None:
    """(start, end) in ``text`` of the first chat-template token its skeleton holds, or None."""
    shape, where = skeleton(text)
    match = TOKENS.search(shape)
    if match is None:
        return None
    return where[match.start()], where[match.end() - 1] + 1
