"""Pieces every config section uses: the base model and paths relative to the config file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

BASE_DIR = "base_dir"  # validation-context key: the directory of the config file


class Section(BaseModel):
    """A config section: unknown keys are refused, so a typo is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _resolve(value: Path, info: ValidationInfo) -> Path:
    value = value.expanduser()
    context: dict[str, Any] = info.context or {}
    if not value.is_absolute() and context.get(BASE_DIR) is not None:
        value = Path(context[BASE_DIR]) / value
    return value


ConfigPath = Annotated[Path, AfterValidator(_resolve)]
"""A path; relative paths are taken relative to the directory of the config file."""

Seconds = Annotated[float, Field(gt=0)]


def _octal_text(value: object) -> object:
    # The role manifest and a NixOS module write a mode as text, "0660" (Nix has no octal).
    if isinstance(value, str):
        if re.fullmatch(r"0?o?[0-7]{3}", value) is None:
            raise ValueError('expected a mode such as 0o660 (TOML) or "0660" (text)')
        return int(value.replace("o", ""), 8)
    return value


def _no_access_for_others(value: int) -> int:
    if value & 0o007:
        raise ValueError(
            f"{value:04o} lets every user on the host connect; give access to a "
            "group instead (mode 0660 and group)"
        )
    return value


SocketMode = Annotated[
    int, BeforeValidator(_octal_text), Field(ge=0, le=0o770), AfterValidator(_no_access_for_others)
]
"""A socket's permission bits: owner and group only; other users never connect."""
