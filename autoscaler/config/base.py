"""The strict pydantic base every fleet-file section derives from."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

MAX_INT = 2**53  # integers beyond this lose precision as floats; no replica count or token limit is near it


class Strict(BaseModel):
    # NaN and Infinity are never meaningful here (prices, times, gains) and would leak into results.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: object, info: ValidationInfo) -> object:
        # pydantic's lax mode reads YAML's true/false as 1/0 wherever a number is expected.
        if isinstance(value, bool) and info.field_name and cls.model_fields[info.field_name].annotation is not bool:
            raise ValueError(f"the boolean {str(value).lower()} is not a valid value here")
        # a 400-digit integer validates as int but overflows the float arithmetic of the controllers
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ValueError(f"an integer of {len(str(abs(value)))} digits is too large (at most 2**53)")
        return value

