"""docs/protocol.md stays true to the code: every frame kind of every socket, every turn event,
every error code and the frame limit are documented, and its example frame is the real bytes."""

from __future__ import annotations

import importlib
import pkgutil
import re
import typing
from pathlib import Path

import pytest
from bxcore import protocol
from bxcore.errors import ErrorCode
from bxcore.frames import MAX_FRAME, Frame, encode_frame
from bxcore.protocol import loop

DOC = (Path(__file__).resolve().parent.parent.parent / "docs" / "protocol.md").read_text()

SOCKET_MODULES = sorted(m.name for m in pkgutil.iter_modules(protocol.__path__))


def kinds_of(module_name: str) -> set[str]:
    """The kinds a socket speaks: the union of its module's TO_* and FROM_* sets."""
    module = importlib.import_module(f"bxcore.protocol.{module_name}")
    sets = [v for k, v in vars(module).items() if re.fullmatch(r"(TO|FROM)_[A-Z_]+", k)]
    assert sets, f"bxcore.protocol.{module_name} declares no TO_*/FROM_* kind sets"
    return set().union(*sets)


def table_rows(first_cell: str) -> list[str]:
    return [line for line in DOC.splitlines() if line.startswith(f"| `{first_cell}` |")]


@pytest.mark.parametrize("module_name", SOCKET_MODULES)
def test_every_frame_kind_has_a_row_in_a_table(module_name):
    undocumented = sorted(kind for kind in kinds_of(module_name) if not table_rows(kind))
    assert undocumented == [], f"add these kinds to docs/protocol.md: {undocumented}"


def test_every_turn_event_type_has_a_row():
    variants = typing.get_args(typing.get_args(loop.TurnEventBody)[0])
    types = {variant.model_fields["type"].default for variant in variants}
    assert "progress" in types
    assert sorted(t for t in types if not table_rows(t)) == []


def test_every_error_code_has_a_row():
    assert sorted(code.value for code in ErrorCode if not table_rows(code.value)) == []


def test_the_documented_limit_is_the_codes():
    assert f"{MAX_FRAME:,}" in DOC and "16 MiB" in DOC


def test_the_example_frame_is_what_the_encoder_writes():
    wire = encode_frame(Frame(kind="turn_done", final=True, body={"content": "Hi", "usage": {}}))
    example = f"{wire[:4].hex(' ')}  {wire[4:].decode()}"
    assert example in DOC
