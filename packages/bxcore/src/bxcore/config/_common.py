"""Pieces every config section uses: the base model and paths relative to the config file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

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
