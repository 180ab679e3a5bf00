"""scripts/llama-server.sh hashes a model again only when the file changed since its last check
passed (a stamp of the pin and the file's device, inode, size, mtime and ctime beside the cache).

Property: whatever is done to a checked file between two checks (bytes changed in place with the
mtime put back, truncated, grown, replaced by a rename, nothing), the check passes exactly when
the file's bytes hash to the pin; so the stamp never lets a changed file through. The real
script is the judge, run on small files in a private cache directory.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "llama-server.sh"


def verify(cache: Path, model: Path, pin: str) -> bool:
    result = subprocess.run(
        [str(SCRIPT), "verify", str(model), pin],
        env={**os.environ, "BOXMAKER_CACHE": str(cache)},
        capture_output=True, text=True, check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def _in_place(path: Path, offset: int, value: int) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[offset % len(data)] = value
    with path.open("r+b") as f:  # the same inode, the same size
        f.write(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime put back; ctime moves


def _truncate(path: Path, offset: int, _value: int) -> None:
    path.write_bytes(path.read_bytes()[: offset % path.stat().st_size])


def _grow(path: Path, _offset: int, value: int) -> None:
    with path.open("ab") as f:
        f.write(bytes([value]))


def _renamed_over(path: Path, offset: int, value: int) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[offset % len(data)] = value
    other = path.with_suffix(".new")
    other.write_bytes(bytes(data))
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    other.replace(path)


def _untouched(_path: Path, _offset: int, _value: int) -> None:
    return None


CHANGES = {f.__name__.lstrip("_"): f for f in (_in_place, _truncate, _grow, _renamed_over,
                                                _untouched)}


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.binary(min_size=1, max_size=4096),
    changes=st.lists(
        st.tuples(st.sampled_from(sorted(CHANGES)), st.integers(0, 1 << 16), st.integers(0, 255)),
        min_size=1, max_size=4,
    ),
)
def test_a_check_passes_exactly_when_the_bytes_match_the_pin(tmp_path_factory, content, changes):
    cache = tmp_path_factory.mktemp("cache")
    model = cache / "models" / "model.gguf"
    model.parent.mkdir()
    model.write_bytes(content)
    pin = hashlib.sha256(content).hexdigest()
    assert verify(cache, model, pin)
    for name, offset, value in changes:
        if model.stat().st_size == 0 and name != "grow":
            continue
        CHANGES[name](model, offset, value)
        matches = hashlib.sha256(model.read_bytes()).hexdigest() == pin
        assert verify(cache, model, pin) is matches, (name, offset, value)


def test_a_stamp_is_for_its_pin(tmp_path):
    """A file stamped under one pin is hashed again, and refused, under another."""
    model = tmp_path / "models" / "model.gguf"
    model.parent.mkdir()
    model.write_bytes(b"weights")
    assert verify(tmp_path, model, hashlib.sha256(b"weights").hexdigest())
    assert not verify(tmp_path, model, "0" * 64)
    assert verify(tmp_path, model, hashlib.sha256(b"weights").hexdigest())
