"""[memory]: memoryd's files, index and Honcho."""

from __future__ import annotations

from ._common import ConfigPath, Section


class MemorySection(Section):
    socket: ConfigPath | None = None  # default: <paths.run>/memory.sock
