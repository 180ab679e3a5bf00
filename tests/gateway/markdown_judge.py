"""Mattermost's Markdown renderer (npm ``@mattermost/commonmark``, installed by scripts/setup
through official_client.py) driven as a judge: one node process, one JSON line per message."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .official_client import renderer_dir

HERE = Path(__file__).parent

# What a post may not render into: anything fetched or followed. The Mattermost renderer makes
# mentions, ~channels and #hashtags into spans the apps link inside the owner's own server; every
# other link, image or HTML is a node of these types, or an element with an address.
ACTIVE_NODES = frozenset({"link", "image", "html_inline", "html_block"})
ACTIVE_HTML = re.compile(r"<(?:a|img|iframe|video|audio|source|object|embed|link)\b"
                         r"|<[^>]*\s(?:href|src|srcset|poster|data|action)=", re.IGNORECASE)


@dataclass(frozen=True)
class Rendered:
    html: str
    types: list[str]
    text: str  # what a reader sees
    prose: str  # what a reader sees outside code blocks
    blocks: list[str]  # each code block's content

    def active(self) -> list[str]:
        """What in this post would fetch or link: empty when it is inert."""
        found = sorted(ACTIVE_NODES.intersection(self.types))
        return found + ACTIVE_HTML.findall(self.html)


class MarkdownJudge:
    def __init__(self) -> None:
        self._node = subprocess.Popen(
            ["node", str(HERE / "markdown_judge.js")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, encoding="utf-8",
            env={**os.environ, "NODE_PATH": str(renderer_dir() / "node_modules")},
        )

    def render(self, message: str) -> Rendered:
        assert self._node.stdin is not None and self._node.stdout is not None
        self._node.stdin.write(json.dumps(message) + "\n")
        self._node.stdin.flush()
        line = self._node.stdout.readline()
        if not line:
            raise RuntimeError(f"the renderer exited ({self._node.wait()})")
        return Rendered(**json.loads(line))

    def close(self) -> None:
        if self._node.stdin is not None:
            self._node.stdin.close()
        self._node.wait(timeout=30)
