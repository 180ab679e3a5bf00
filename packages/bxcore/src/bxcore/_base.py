"""The base every boundary model shares: unknown fields are refused, values are immutable."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    model_serializer,
)

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


class OptionalKeys(Model):
    """A model whose fields named in ``OMITTED_WHEN_NONE`` have no key at all when None.

    For a field added later to a value whose bytes are pinned (a log record, a frame): a value
    without it encodes exactly as before the field existed, and the old bytes still parse."""

    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        for name in self.OMITTED_WHEN_NONE:
            if data.get(name, "") is None:
                del data[name]
        return data


Count = Annotated[StrictInt, Field(ge=0)]
Text = StrictStr
Flag = StrictBool
