"""Making a frozen pydantic model from values its rules were already applied to.

:func:`trusted` is pydantic's ``model_construct`` without its per-field bookkeeping,
for the hot paths that build models from values they checked themselves (a receipt
the engine assembles, a transaction whose operations are validated models). It
never checks anything: a caller uses it only where the validated constructor
would accept the very same values and keep them unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

_M = TypeVar("_M", bound=BaseModel)
_set = object.__setattr__


def trusted(cls: type[_M], values: dict[str, Any], given: Iterable[str] | None = None) -> _M:
    """An instance of *cls* holding *values* (every field, in declaration order).

    *given* names the fields the caller passed (``model_fields_set``); all of them
    when None. The model must have no extra fields and no private attributes.
    """
    obj = cls.__new__(cls)
    _set(obj, "__dict__", values)
    _set(obj, "__pydantic_fields_set__", set(values if given is None else given))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj
