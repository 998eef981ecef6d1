"""The strict pydantic base of every file the product reads (fleet files, fault scenarios,
performance profiles): unknown keys, NaN/Infinity, booleans or quoted strings where a number is
expected and integers beyond 2**53 are errors, not silently coerced."""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

MAX_INT = 2**53  # integers beyond this lose precision as floats; no replica count or token limit is near it


def _numeric(annotation: Any) -> bool:
    """True for ``int``, ``float`` and their optional forms."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(a in (int, float) for a in args)
    return False


_YAML11_EXPONENT = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+")
"""A number PyYAML (YAML 1.1) reads as a string: an exponent with no decimal point (``1e-3``)."""


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
        # pydantic's lax mode also reads "2.99" as 2.99: a quoted number is a typo worth naming
        if isinstance(value, str) and info.field_name and _numeric(cls.model_fields[info.field_name].annotation):
            if _YAML11_EXPONENT.fullmatch(value.strip()):  # YAML 1.1 reads 1e-3 as text, not a number
                raise ValueError(f"a number is expected, got the string {value!r}: YAML reads an exponent "
                                 "without a decimal point as text (write 1.0e-3, or 0.001)")
            raise ValueError(f"a number is expected, got the string {value!r} (write it without quotes)")
        return value
