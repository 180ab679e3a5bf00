"""The base every boundary model shares: unknown fields are refused, values are immutable."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from .canonical import canonical_json


class Model(BaseModel):
    """A frozen pydantic model that refuses unknown fields.

    Primitive fields use the Strict* types below, so a string is never taken for a number or a
    flag; enums still accept their string values, as JSON carries them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def canonical(self) -> bytes:
        """This value in the canonical JSON encoding (see bxcore.canonical)."""
        return canonical_json(self)


Count = Annotated[StrictInt, Field(ge=0)]
Text = StrictStr
Flag = StrictBool
