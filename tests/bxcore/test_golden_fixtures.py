"""Golden fixtures: the bytes of every log record, wire value and frame are pinned.

Each fixture file must equal, byte for byte, both the canonical JSON of the value built in
golden_values.py and the canonical JSON of the file parsed back. A change to a model, to the
canonical encoding or to a fixture makes one of these fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bxcore.canonical import canonical_json
from bxcore.frames import Frame, FrameDecoder, encode_frame
from golden_values import FRAMES, RECORDS
from pydantic import BaseModel, TypeAdapter, ValidationError

FIXTURES = Path(__file__).parent.parent / "fixtures"
RECORD_DIR = FIXTURES / "records"
FRAME_DIR = FIXTURES / "frames"


def golden_mismatch(data: bytes, adapter: TypeAdapter, expected: BaseModel) -> str | None:
    """Why ``data`` is not the golden encoding of ``expected`` (None when it is)."""
    try:
        parsed = adapter.validate_json(data)
    except ValidationError as exc:
        return f"does not parse: {exc}"
    if canonical_json(parsed) != data:
        return "is not in canonical form"
    if parsed != expected or canonical_json(expected) != data:
        return "does not hold the expected value"
    return None


def test_every_fixture_file_has_a_spec_and_every_spec_a_file():
    assert sorted(p.stem for p in RECORD_DIR.glob("*.json")) == sorted(RECORDS)
    assert sorted(p.stem for p in FRAME_DIR.glob("*.json")) == sorted(FRAMES)


def test_there_is_a_fixture_for_every_log_record_variant():
    variants = {expected.type for _, expected in RECORDS.values() if hasattr(expected, "type")}
    assert variants == {
        "session_start", "user", "assistant", "usage", "tool_result", "cache_loss", "epoch_end",
    }


def test_there_is_a_frame_fixture_for_every_loop_sock_kind():
    from bxcore.protocol import loop

    kinds = {g.kind for name, g in FRAMES.items() if name.startswith("loop_")}
    assert kinds == set(loop.TO_LOOPD) | set(loop.FROM_LOOPD)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_record_fixture_is_byte_exact(name):
    adapter, expected = RECORDS[name]
    data = (RECORD_DIR / f"{name}.json").read_bytes()
    assert golden_mismatch(data, adapter, expected) is None


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_frame_fixture_is_byte_exact_on_the_wire(name):
    golden = FRAMES[name]
    payload = (FRAME_DIR / f"{name}.json").read_bytes()
    wire = len(payload).to_bytes(4, "big") + payload

    assert encode_frame(Frame.of(golden.kind, golden.body, final=golden.final)) == wire

    decoder = FrameDecoder(kinds=golden.kinds)
    decoder.feed(wire)
    frame = decoder.next_event()
    assert isinstance(frame, Frame)
    assert (frame.kind, frame.final) == (golden.kind, golden.final)
    assert frame.parse(type(golden.body)) == golden.body
    assert encode_frame(frame) == wire


def _mutations(data: bytes) -> dict[str, bytes]:
    """Ways a record's bytes could drift, each of which must be caught."""
    members = json.loads(data)
    reordered = json.dumps(
        dict(reversed(members.items())), ensure_ascii=False, separators=(",", ":")
    )
    changed = dict(members)
    key = next(k for k, v in members.items() if isinstance(v, str | int) and k != "type")
    changed[key] = members[key] + ("x" if isinstance(members[key], str) else 1)
    return {
        "a space after a colon": data.replace(b":", b": ", 1),
        "a trailing newline": data + b"\n",
        "keys out of order": reordered.encode(),
        "non-ASCII escaped": json.dumps(members, sort_keys=True, separators=(",", ":")).encode(),
        "an unknown field": data[:-1] + b',"zzz":1}',
        "a value changed": canonical_json(changed),
    }


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_changing_a_records_bytes_fails_the_golden_check(name):
    adapter, expected = RECORDS[name]
    data = (RECORD_DIR / f"{name}.json").read_bytes()
    for how, changed in _mutations(data).items():
        if changed == data:
            continue  # e.g. escaping changes nothing in an all-ASCII record
        assert golden_mismatch(changed, adapter, expected) is not None, how


def test_user_fixture_holds_utf8_not_ascii_escapes():
    data = (RECORD_DIR / "user.json").read_bytes()
    assert "Grüße".encode() in data and "🦀".encode() in data
    assert b"\\u" not in data
