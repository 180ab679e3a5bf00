"""Boxmaker's config file: TOML, one section per role, validated by pydantic.

Unknown keys are refused. An error names the file, the dotted key and what was expected::

    config.toml: loop.tool_iterations: Input should be greater than or equal to 1 (got 0)

Relative paths are taken relative to the config file's directory.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from ..errors import ConfigError
from ._common import BASE_DIR, ConfigPath, Seconds, Section
from ._core import ChannelSection, PathsSection, SecretSpec
from .broker import BrokerSection
from .gateway import GatewaySection
from .inference import InferenceSection, InferproxySection
from .loop import BaselineSection, LoopSection
from .memory import MemorySection


class Config(Section):
    paths: PathsSection = Field(default_factory=PathsSection)
    secrets: dict[str, SecretSpec] = Field(default_factory=dict)
    channel: ChannelSection = Field(default_factory=ChannelSection)
    inferproxy: InferproxySection = Field(default_factory=InferproxySection)
    inference: InferenceSection = Field(default_factory=InferenceSection)
    loop: LoopSection = Field(default_factory=LoopSection)
    baseline: BaselineSection = Field(default_factory=BaselineSection)
    broker: BrokerSection = Field(default_factory=BrokerSection)
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    memory: MemorySection = Field(default_factory=MemorySection)

    def socket(self, name: str) -> Path:
        """The path of a role socket in the run directory, e.g. ``socket("loop")``."""
        return self.paths.run / f"{name}.sock"

    @property
    def loop_socket(self) -> Path:
        return self.channel.socket or self.socket("loop")


def parse_config(text: str, source: str | Path, base_dir: Path | None = None) -> Config:
    """Validate config text; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return config_from_dict(data, source, base_dir)


def config_from_dict(data: dict[str, Any], source: str | Path, base_dir: Path | None) -> Config:
    try:
        return Config.model_validate(data, context={BASE_DIR: base_dir})
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; every failure is a ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_config(text, path, path.resolve().parent)


def describe(exc: ValidationError, source: str | Path) -> str:
    lines = []
    for error in exc.errors():
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif "input" in error and error["type"] != "missing":
            message += f" (got {error['input']!r})"
        lines.append(f"{source}: {key}: {message}")
    return "\n".join(lines)


__all__ = [
    "BaselineSection", "BrokerSection", "ChannelSection", "Config", "ConfigPath",
    "GatewaySection", "InferenceSection", "InferproxySection", "LoopSection", "MemorySection",
    "PathsSection", "SecretSpec", "Seconds", "Section", "config_from_dict", "describe",
    "load_config", "parse_config",
]
