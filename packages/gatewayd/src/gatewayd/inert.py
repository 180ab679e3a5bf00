r"""Model text made inert for Mattermost: pure functions, no I/O.

A post's Markdown is rendered by the owner's client, and the server reads it for link previews:
an image, a link or an autolink in a model's answer makes the client or the server fetch a URL
the model chose, which carries whatever the model put in it. ``inert_posts`` turns text into
posts that keep every word visible and contain none of these, whatever a renderer decides about
where code begins and ends (docs/decisions/output-channels.md):

- a fenced code block (at the top level, as this module reads it) is fenced again with a fence
  longer than any backtick run inside it, with a blank line before and after, so its content is
  code in every CommonMark or marked reading; its language is kept only if it names no renderer
  of its own (``latex``);
- everything else is prose, changed character by character, so that no reading, code span or
  not, finds active syntax in it: ``<`` is ``&lt;`` (no HTML, no ``<autolink>``); a ``]`` before
  ``(``, ``[`` or ``:`` is ``&#93;`` (no inline link, image, reference or definition); a URL
  scheme's colon, a ``www.``, a domain's dot before a path and an ``@`` with anything before it
  and a dot after are shown as ``⟨:⟩``, ``⟨.⟩``, ``⟨@⟩`` (no autolink of any kind). Mentions,
  ~channels and #hashtags are left alone: they link only inside the owner's own server.
- prose holds no fence: every run of three or more backticks or tildes is written with each
  character escaped (``\`\`\```), so no cut, prefix or reading of line ends makes a fence of it
  that would swallow gatewayd's own fences and set their content free as Markdown (the fourth
  attack on issue 31);
- a lone carriage return and CRLF end a line for every renderer: they are made ``\n`` first,
  so gatewayd sees the lines the renderer sees.

Posts are cut at most ``limit`` runes long: prose at a paragraph, line or space break, a code
block into several blocks each with its own fence, so every part is inert on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .models import MAX_POST_RUNES

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
_RENDERED_LANGUAGES = frozenset({"latex", "tex", "katex", "inline_latex", "mermaid"})
_BACKTICK_RUN = re.compile(r"`+")

# Prose, in the order applied. A scheme is what marked's and CommonMark's autolinkers take for
# one: a letter, then letters, digits, "+", "-" or "."; its colon is defanged when a slash, a
# letter, a digit or "%" follows (the web app's marked links "mailto:x" and "x:y" alike). The
# pattern takes the whole run of scheme characters before the colon, from its start only, and
# _defang_scheme asks for the letter: a pattern starting at any letter scanned the rest of the
# run from each, quadratic in its length (a second per 16,000 letters, at every streamed edit).
_SCHEME_COLON = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z0-9+.\-]+):(?=[/\w%])")
_LETTER = re.compile(r"[A-Za-z]")
_WWW_DOT = re.compile(r"(?i)(www\d{0,3})\.")
_DOMAIN_DOT = re.compile(r"(?<=[\w.\-])\.(?=[^\W\d_]{2,63}/)")
# Any local part (Mattermost's e-mail autolinker takes !#$%&'*/=?^`{|}~ and quoted ones) and
# any domain with a dot, even first: only an @ at the start of a word (a mention) is left.
_EMAIL_AT = re.compile(r"(?<=\S)@(?=[^\s@]*\.)")
_FENCE_RUN = re.compile(r"`{3,}|~{3,}")
_BRACKET_BEFORE = re.compile(r"\](?=[(\[:])")


@dataclass(frozen=True)
class _Prose:
    text: str


@dataclass(frozen=True)
class _Code:
    lines: tuple[str, ...]
    language: str


def inert_prose(text: str) -> str:
    """``text`` with nothing a Markdown renderer would make into a link, image or HTML, every
    word still there. Safe anywhere in a post: in a paragraph, a list, a table or a code span."""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _SCHEME_COLON.sub(_defang_scheme, text)
    text = _WWW_DOT.sub(r"\1⟨.⟩", text)
    text = _DOMAIN_DOT.sub("⟨.⟩", text)
    text = _EMAIL_AT.sub("⟨@⟩", text)
    text = _FENCE_RUN.sub(lambda run: "".join(f"\\{c}" for c in run.group()), text)
    return _BRACKET_BEFORE.sub("&#93;", text)


def _defang_scheme(run: re.Match[str]) -> str:
    scheme = run.group(1)
    return f"{scheme}⟨:⟩" if _LETTER.search(scheme) else run.group()


def code_block(lines: list[str] | tuple[str, ...], language: str = "text") -> str:
    """``lines`` as a fenced code block no line can close: the fence is longer than any run of
    backticks anywhere in them (marked closes a fence at its run even mid-line)."""
    longest = max((len(m) for line in lines for m in _BACKTICK_RUN.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    body = "".join(f"{line}\n" for line in lines)
    return f"{fence}{language}\n{body}{fence}"


def inert_posts(text: str, limit: int = MAX_POST_RUNES) -> list[str]:
    """``text`` made inert and cut into posts of at most ``limit`` runes (none for "")."""
    chunks: list[str] = []
    for block in _blocks(text.replace("\r\n", "\n").replace("\r", "\n")):
        if isinstance(block, _Code):
            chunks += code_blocks(block.lines, block.language, limit)
        elif block.text.strip():
            chunks += _cut(inert_prose(block.text.strip("\n")), limit)
    return _pack(chunks, limit)


def code_blocks(lines: tuple[str, ...] | list[str], language: str, limit: int) -> list[str]:
    """``lines`` as one code block, or as several when one would pass ``limit``: each fenced."""
    blocks: list[str] = []
    piece: list[str] = []
    for line in _short_lines(lines, limit // 2):
        if piece and len(code_block([*piece, line], language)) > limit:
            blocks.append(code_block(piece, language))
            piece = []
        piece.append(line)
    if piece or not blocks:
        blocks.append(code_block(piece, language))
    return blocks


def _short_lines(lines: tuple[str, ...] | list[str], most: int) -> list[str]:
    """Lines of at most ``most`` runes: a longer one is cut into several (no fence fits it)."""
    short: list[str] = []
    for line in lines:
        short += [line[i:i + most] for i in range(0, len(line), most)] or [""]
    return short


def _blocks(text: str) -> list[_Prose | _Code]:
    """``text`` as prose and top-level fenced code blocks (an unclosed fence runs to the end)."""
    blocks: list[_Prose | _Code] = []
    prose: list[str] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        # Any line some renderer opens a fence with is one here (marked allows a backtick in
        # the info, CommonMark does not): prose keeps no fence a renderer could open.
        opened = _FENCE_OPEN.match(lines[index])
        if opened is None:
            prose.append(lines[index])
            index += 1
            continue
        if prose:
            blocks.append(_Prose("\n".join(prose)))
            prose = []
        fence, info = opened.group(1), opened.group(2).strip()
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((i for i in range(index + 1, len(lines)) if close.match(lines[i])), len(lines))
        language = _language(info)
        if info and info != language:  # words a renderer would hide in an attribute: shown
            blocks.append(_Prose(info))
        blocks.append(_Code(tuple(lines[index + 1:end]), language))
        index = end + 1
    if prose:
        blocks.append(_Prose("\n".join(prose)))
    return blocks


def _language(info: str) -> str:
    word = info.split(maxsplit=1)[0] if info else ""
    if _LANGUAGE.fullmatch(word) and word.lower() not in _RENDERED_LANGUAGES:
        return word
    return "text"


def split_message(text: str, limit: int = MAX_POST_RUNES) -> list[str]:
    """Cut ``text`` into posts of at most ``limit`` runes (code points, as the server counts),
    after a paragraph break, else a line break, else a space, in the second half of the window.
    Nothing is dropped: the parts joined are the text (no parts for an empty text)."""
    parts = []
    while len(text) > limit:
        window = text[:limit]
        cut = limit
        for separator in ("\n\n", "\n", " "):
            found = window.rfind(separator, limit // 2)
            if found > 0:
                cut = found + len(separator)
                break
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    return [part for part in parts if part]


def _cut(text: str, limit: int) -> list[str]:
    """Inert prose cut like a post (``split_message``), leaving out pieces of white space only; a
    hard cut is safe too (a piece of an entity, of a ``⟨.⟩`` or of an escaped backtick run forms
    nothing), only less pretty."""
    return [piece for piece in split_message(text, limit) if piece.strip()]


def _pack(chunks: list[str], limit: int) -> list[str]:
    """Chunks joined by blank lines into as few posts as fit ``limit``."""
    posts: list[str] = []
    for chunk in chunks:
        if posts and len(posts[-1]) + 2 + len(chunk) <= limit:
            posts[-1] += "\n\n" + chunk
        else:
            posts.append(chunk)
    return posts
