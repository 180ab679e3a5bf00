"""Reading the owner's small TOML files (grants, jobs): which ones, and their text, bounded."""

from __future__ import annotations

from pathlib import Path

from .errors import BrokerError


def toml_files(directory: Path, error: type[BrokerError], what: str) -> list[Path]:
    """The ``*.toml`` files in ``directory``, sorted; none when it does not exist."""
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == ".toml" and p.is_file())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise error(f"{directory}: cannot list the {what} directory: {exc.strerror}") from None


def read_text(path: Path, limit: int, error: type[BrokerError], what: str) -> str:
    """A UTF-8 file of at most ``limit`` bytes; ``error`` names the file otherwise."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise error(f"{path}: over {limit} bytes; not {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 (byte {exc.start})") from None
