"""Body forms: the nested S-expression values a frame body is made of.

A form is one of

* :class:`Symbol` — an atom such as ``packaging`` or ``cn-shanghai`` or ``上海``;
* ``str`` — a double-quoted string;
* ``int`` — an integer written in canonical decimal (``0``, ``-3``, ``42``);
* ``tuple`` of forms — a parenthesised list.

Forms are kept exactly: printing a parsed body yields forms that parse back
equal (R3, R6). Size and nesting are bounded (R45).
"""

from __future__ import annotations

import re
from typing import Any, TypeAlias

from protocol.errors import WireError

MAX_DEPTH = 32
"""Deepest nesting of lists accepted anywhere in a transaction."""

MAX_ATOM_CHARS = 4096
MAX_STRING_CHARS = 1 << 20
MAX_INT_DIGITS = 40

_INT_RE = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class Symbol(str):
    """An atom. Distinct from ``str`` so that ``release`` and ``"release"`` stay apart."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


Form: TypeAlias = Any  # Symbol | str | int | tuple[Form, ...]


def is_int_text(text: str) -> bool:
    """True if *text* is an integer in canonical decimal (it reads back as ``int``)."""
    return bool(_INT_RE.match(text)) and len(text) - text.startswith("-") <= MAX_INT_DIGITS


def check_form(form: Form, depth: int = 0) -> None:
    """Raise :class:`WireError` unless *form* is a well-formed, bounded form."""
    if depth > MAX_DEPTH:
        raise WireError(f"forms nest deeper than {MAX_DEPTH} levels")
    if type(form) is tuple and depth < MAX_DEPTH:  # the common shapes first, by exact type
        for item in form:
            if type(item) is Symbol and 0 < len(item) <= MAX_ATOM_CHARS and is_atom_text(item):
                continue
            check_form(item, depth + 1)
        return
    if isinstance(form, Symbol):
        if not form or len(form) > MAX_ATOM_CHARS:
            raise WireError("atoms must be 1 to 4096 characters")
        if not is_atom_text(form):
            raise WireError(f"not a valid atom: {str(form)[:40]!r}")
    elif isinstance(form, str):
        if len(form) > MAX_STRING_CHARS:
            raise WireError("string longer than 1 MiB characters")
        if not form.isascii() and _SURROGATE.search(form) is not None:
            # The text reader refuses these too; no store or wire form can encode one.
            raise WireError("a string holds a lone surrogate")
    elif isinstance(form, bool):
        raise WireError("booleans are not forms; write an atom such as true")
    elif isinstance(form, int):
        if len(str(abs(form))) > MAX_INT_DIGITS:
            raise WireError("integer has more than 40 digits")
    elif isinstance(form, tuple):
        for item in form:
            check_form(item, depth + 1)
    else:
        raise WireError(f"not a form: {type(form).__name__}")


_ATOM_FORBIDDEN = set('()";') | {"\\"}
# Every whitespace character but the ASCII space is also unprintable, so one C-level
# isprintable() and this search decide what the per-character loop did.
_ATOM_BREAKS = re.compile(r'[()";\\ ]')


def is_atom_text(text: str) -> bool:
    """True if *text* can be printed bare as an atom and read back as the same Symbol."""
    if not text or is_int_text(text):
        return False
    return text.isprintable() and _ATOM_BREAKS.search(text) is None


def to_plain(form: Form) -> Any:
    """A JSON-ready rendering: symbols as strings, strings as ``{"s": text}``, lists as lists."""
    if isinstance(form, Symbol):
        return str(form)
    if isinstance(form, str):
        return {"s": form}
    if isinstance(form, tuple):
        return [to_plain(x) for x in form]
    return form


def from_plain(value: Any, depth: int = 0) -> Form:
    """Inverse of :func:`to_plain`; raises :class:`WireError` on anything else."""
    if depth > MAX_DEPTH:
        raise WireError(f"forms nest deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool):
        raise WireError("booleans are not forms")
    if isinstance(value, str):
        sym = Symbol(value)
        check_form(sym)
        return sym
    if isinstance(value, int):
        check_form(value)
        return value
    if isinstance(value, dict):
        if set(value) != {"s"} or not isinstance(value["s"], str):
            raise WireError('a string form must be {"s": text}')
        check_form(value["s"])
        return value["s"]
    if isinstance(value, (list, tuple)):
        return tuple(from_plain(x, depth + 1) for x in value)
    raise WireError(f"not a form: {type(value).__name__}")
