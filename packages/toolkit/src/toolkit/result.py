"""What a tool returns, how its content is capped, and the errors a tool raises."""

from __future__ import annotations

TYPE_CHECKING = False  # neither typing nor dataclasses is imported at run time (start cost)
if TYPE_CHECKING:
    from typing import Any

    from .beneath import Opened

DATA_CLASSES = ("public", "private", "secret")


class ToolError(Exception):
    """The tool could not do what was asked; the message is shown to the model."""

    kind = "tool"
    exit_status = 1


class UsageError(ToolError):
    """The command line or the JSON arguments are wrong."""

    kind = "usage"
    exit_status = 2


class Context:
    """What brokerd tells the program about its call, on the command line, never in env."""

    __slots__ = ("cap", "data_class", "egress", "opened", "roots", "settings")

    def __init__(
        self,
        data_class: str,  # the label the grant gives this call's results
        roots: tuple[str, ...],  # the granted paths as they appear inside the sandbox
        cap: int,  # content is cut to this many UTF-8 bytes
        egress: bool,  # an egress proxy is bridged in (the grant named hosts)
        # Tool settings from brokerd's config (``--settings``, a JSON object), e.g. consult's
        # endpoint. Configuration only: secrets come as files, never here.
        settings: dict[str, Any] | None = None,
        # The path a file tool opens, as brokerd decided it (``beneath.Opened``); None for
        # other tools, and file tools then open nothing.
        opened: Opened | None = None,
    ):
        self.data_class = data_class
        self.roots = roots
        self.cap = cap
        self.egress = egress
        self.settings: dict[str, Any] = {} if settings is None else settings
        self.opened = opened


class Result:
    __slots__ = ("content", "data_class", "truncated", "untrusted")

    def __init__(self, content: str, data_class: str, untrusted: bool, truncated: bool):
        self.content = content
        self.data_class = data_class
        self.untrusted = untrusted
        self.truncated = truncated

    def as_json(self) -> dict[str, object]:
        return {
            "class": self.data_class,
            "content": self.content,
            "truncated": self.truncated,
            "untrusted": self.untrusted,
        }


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """``text`` cut to at most ``cap`` UTF-8 bytes (never mid-character), and whether it was."""
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


def make_result(context: Context, text: str, *, untrusted: bool, cut: bool = False) -> Result:
    content, truncated = cap_text(text, context.cap)
    return Result(content, context.data_class, untrusted, truncated or cut)
