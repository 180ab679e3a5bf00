"""Run toolkit programs in-process, as ``bx-tool`` would from the command line."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import pytest
from toolkit.main import main


@dataclass
class Call:
    status: int
    document: dict[str, Any]

    @property
    def content(self) -> str:
        return self.document["content"]

    @property
    def error(self) -> str:
        return self.document["error"]


@pytest.fixture
def bx_tool(capsys, monkeypatch):
    """``bx_tool(name, arguments, *options, stdin=False)``: one call; stdout must be one JSON
    line and nothing else."""

    def call(name: str, arguments: Any, *options: str, stdin: bool = False) -> Call:
        text = json.dumps(arguments)
        argv = [name, *options]
        if stdin:
            monkeypatch.setattr("sys.stdin", io.StringIO(text))
        else:
            argv.append(text)
        status = main(argv)
        out = capsys.readouterr().out
        assert out.endswith("\n") and out.count("\n") == 1, out
        return Call(status, json.loads(out))

    return call
