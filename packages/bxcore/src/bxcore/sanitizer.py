"""The check every memory write passes, and passes again when the baseline is built (pure).

Memory text ends up in the prompt (identity files) or in tool results (recall), so it must not be
able to act as anything but data. ``check(text)`` refuses:

- ``control``: control characters other than newline and tab (C0, DEL, C1);
- ``invisible``: characters that render as nothing or reorder text: format characters (zero
  width, bidi embeddings, overrides and isolates, BOM, soft hyphen, Unicode tag characters),
  variation selectors, line/paragraph separators, private use and unassigned code points, and a
  few blank letters (Hangul fillers, braille blank);
- ``markup``: chat-template markup of the common templates (ChatML ``<|im_start|>``, thinking
  ``<think>``, Qwen tool calls ``<tool_call>``/``<function=``, Llama 3 ``<|start_header_id|>``,
  Gemma ``<start_of_turn>``, Mistral ``[INST]``, Harmony ``<|channel|>``, any ``<|name|>``...);
- ``instruction``: a short list of instruction phrases (``ignore previous instructions``...).

Markup and phrases are matched on a folded copy of the text (NFKC per character, case folded,
whitespace runs collapsed), so full-width look-alikes and spacing tricks do not get through; the
verdict's ``position`` is always an index into the original text. Chat-template tokens are also
matched on the text's skeleton (``_skeleton``: look-alikes mapped to ASCII, formatting markup,
whitespace and invisible characters removed), which catches a token split by spaces, lines or
``<b></b>``, or spelled with Cyrillic letters and angle quotes. ``check`` never raises.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from ._skeleton import find_token
from .visible import is_invisible

Rule = Literal["control", "invisible", "markup", "instruction"]

_ALLOWED_CONTROLS = frozenset("\n\t")


# Chat-template markup, matched on the folded text (lower case, one space for any whitespace run).
_MARKUP = re.compile(
    "|".join(
        [
            r"< ?\| ?[a-z0-9_.\-]+ ?\| ?>",  # <|im_start|>, <|eot_id|>, <|channel|>, <|end|> ...
            r"</? ?(?:think|thinking|tool_call|tool_response|tool_calls|function|parameter)\b",
            r"<(?:function|parameter) ?=",  # Qwen XML tool calls: <function=name>
            r"</? ?(?:start_of_turn|end_of_turn|start_of_image|bos|eos)\b",  # Gemma
            r"\[/? ?inst ?\]",  # Mistral / Llama 2 [INST] [/INST]
            r"<</? ?sys ?>>",  # Llama 2 <<SYS>>
            r"\[/? ?(?:system_prompt|tool_calls|tool_results|available_tools)\]",  # Mistral v7
            r"</? ?s>",  # sentencepiece sentence markers
            r"(?:^|\n) ?(?:<\|)?(?:system|assistant|developer) ?(?:\|>)? ?\n",  # bare role headers
            r"(?:^|\n) ?#{2,3} ?(?:instruction|system|response) ?:",  # Alpaca-style headers
        ]
    )
)

_INSTRUCTIONS = re.compile(
    "|".join(
        [
            r"\b(?:ignore|disregard|forget|override|bypass) (?:all |any |the |your |of )*"
            r"(?:previous|prior|above|earlier|preceding|existing|system|original) "
            r"(?:instructions|prompts?|rules|guidelines|directions|context)",
            r"\b(?:ignore|disregard|forget) (?:everything|all) (?:you were|you've been|above)",
            r"\bnew (?:system )?instructions ?:",
            r"\b(?:new|updated|real|actual) system prompt\b",
            r"\byou are now (?:a |an |in |the |my |no longer )",
            r"\bfrom now on,? (?:you|always|never) (?:must|will|are|should|ignore|obey)",
            r"\bdo not (?:tell|inform|alert|mention (?:this )?to) the (?:user|owner)\b",
            r"\b(?:developer|god|jailbreak|dan) mode\b",
            r"\breveal (?:your|the) (?:system prompt|instructions|secrets?)\b",
        ]
    )
)


@dataclass(frozen=True, kw_only=True)
class Accepted:
    ok: Literal[True] = True

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True, kw_only=True)
class Refused:
    """Why text was refused: the rule, a reason for humans and the model, and where (an index
    into the original text)."""

    rule: Rule
    reason: str
    position: int
    ok: Literal[False] = False

    def __bool__(self) -> bool:
        return False

    def describe(self) -> str:
        return f"{self.reason} at character {self.position}"


Verdict = Accepted | Refused


def check(text: str) -> Verdict:
    """The sanitizer's verdict on ``text``: Accepted, or Refused with the first problem found."""
    for position, char in enumerate(text):
        refusal = _check_char(char, position)
        if refusal is not None:
            return refusal
    folded, origin = _fold(text)
    match = _MARKUP.search(folded)
    if match is not None:
        start = _first_visible(folded, match.start())
        return Refused(
            rule="markup",
            reason=f"chat-template markup {_excerpt(text, origin, start, match.end())!r}",
            position=origin[start],
        )
    token = find_token(text)
    if token is not None:
        start, end = token
        return Refused(
            rule="markup",
            reason=f"chat-template token {text[start:end][:60]!r} (split or disguised)",
            position=start,
        )
    # Phrases may be split over lines; markup role headers may not (they need the newline).
    match = _INSTRUCTIONS.search(folded.replace("\n", " "))
    if match is not None:
        return Refused(
            rule="instruction",
            reason=f"instruction phrase {_excerpt(text, origin, match.start(), match.end())!r}",
            position=origin[match.start()],
        )
    return Accepted()


def _check_char(char: str, position: int) -> Refused | None:
    if char in _ALLOWED_CONTROLS:
        return None
    category = unicodedata.category(char)
    code = ord(char)
    if category == "Cc":
        return Refused(
            rule="control", reason=f"control character U+{code:04X}", position=position
        )
    if is_invisible(char):
        name = unicodedata.name(char, "unnamed")
        return Refused(
            rule="invisible",
            reason=f"invisible character U+{code:04X} ({name})",
            position=position,
        )
    return None


def _fold(text: str) -> tuple[str, list[int]]:
    """The folded text, and for each folded character the index of the original it came from.

    Per-character NFKC (not whole-string) keeps the map exact; combining sequences do not matter
    for ASCII markup and phrases.
    """
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        piece = unicodedata.normalize("NFKC", char).casefold()
        for out in piece:
            if out.isspace() and out != "\n":
                out = " "
            if out == " " and folded and folded[-1] in " \n":
                continue
            if out == "\n" and folded and folded[-1] == " ":
                folded[-1] = "\n"
                origin[-1] = index
                continue
            folded.append(out)
            origin.append(index)
    origin.append(len(text))
    return "".join(folded), origin


def _first_visible(folded: str, start: int) -> int:
    while start < len(folded) and folded[start] in " \n":
        start += 1
    return start


def _excerpt(text: str, origin: list[int], start: int, end: int) -> str:
    return text[origin[start] : origin[end]].strip()[:60]


__all__ = ["Accepted", "Refused", "Rule", "Verdict", "check"]
