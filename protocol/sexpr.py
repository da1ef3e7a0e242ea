"""The text of forms: reading S-expressions into forms and printing them back (R6).

:func:`read_forms` turns text into :data:`~protocol.forms.Form` values and
:func:`print_form` turns a form back into canonical text; the two are
inverse: ``read_forms(print_form(f)) == [f]``. The transaction grammar on top
of these forms is :mod:`protocol.txlang`.

Lexical rules:

* whitespace is whatever ``str.isspace`` accepts; ``;`` starts a comment that
  runs to the end of the line;
* an atom is a run of characters other than whitespace, ``( ) " ; \\``; every
  character must be printable (Unicode letters, Chinese included); an atom
  in canonical decimal (``0``, ``-3``, ``42``, at most 40 digits) is an ``int``,
  every other atom a :class:`~protocol.forms.Symbol`;
* a string is double-quoted; the escapes are ``\\" \\\\ \\n \\t \\r`` and
  ``\\uXXXX``; raw newlines and tabs may appear inside, other control
  characters and lone surrogates may not.

Every reading failure is a :class:`~protocol.errors.ParseError` carrying the
1-based line and column (in characters) of the offending character or form.
"""

from __future__ import annotations

import re
from typing import Any

from protocol.errors import ParseError
from protocol.forms import (
    MAX_ATOM_CHARS,
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_STRING_CHARS,
    Form,
    Symbol,
    is_int_text,
)

MAX_TEXT_BYTES = 4 << 20
"""Largest text read, in UTF-8 bytes (4 MiB); a transaction's text is read this way."""

_TOKEN = re.compile(
    r"(?:\s|;[^\n]*)*+"  # blanks and comments, possessively
    r'(?:([^\s()";\\]+)'  # 1: an atom
    r"|(\()|(\))"  # 2, 3: parentheses
    r'|"([^"\\\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]*)"'  # 4: a string without escapes
    r"|(.)"  # 5: the start of any other string, or a stray backslash
    r"|\Z)",  # the end: every position matches, so no text is ever skipped
    re.S,
)
_PLAIN_STR = re.compile(r'"([^"\\\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]*)"')
_STR_RUN = re.compile(r'[^"\\\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]*')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_ESCAPE_LIST = '\\" \\\\ \\n \\t \\r \\uXXXX'
_ATOM_TEXT = re.compile(r'[^\s()";\\]+')

_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f-\x9f]')
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ESCAPES_OUT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}

_TOO_DEEP = f"forms nest deeper than {MAX_DEPTH} levels"


class Located:
    """Where a list starts in the text, and where its items start (if tracked)."""

    __slots__ = ("offset", "items")

    def __init__(self, offset: int, items: list[Any] | None) -> None:
        self.offset = offset
        self.items = items


def offset_of(where: Any) -> int:
    """The offset a :func:`read_located` location names: a list's start, or the offset itself."""
    return where.offset if isinstance(where, Located) else int(where)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - text.rfind("\n", 0, offset)
    return line, column


def error_at(text: str, offset: int, message: str) -> ParseError:
    """A :class:`ParseError` with *message* at the line and column of *offset* in *text*."""
    line, column = _line_col(text, offset)
    return ParseError(message, line, column)


def _check_size(text: str) -> None:
    if not isinstance(text, str):
        raise ParseError(f"expected text (str), got {type(text).__name__}", 1, 1)
    if len(text) * 4 > MAX_TEXT_BYTES:
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_TEXT_BYTES:
            raise ParseError(f"text is larger than {MAX_TEXT_BYTES} bytes", 1, 1)


def _read_string(text: str, start: int, too_deep: bool) -> tuple[str, int]:
    """Read the string whose opening quote is at *start*; return it and the end offset."""
    if too_deep:
        raise error_at(text, start, _TOO_DEEP)
    m = _PLAIN_STR.match(text, start)
    if m is not None:
        value = m.group(1)
        end = m.end()
    else:
        parts: list[str] = []
        n = len(text)
        pos = start + 1
        while True:
            run = _STR_RUN.match(text, pos)
            end_run = run.end() if run is not None else pos
            if end_run > pos:
                parts.append(text[pos:end_run])
                pos = end_run
            if pos >= n:
                raise error_at(text, start, "unterminated string")
            ch = text[pos]
            if ch == '"':
                end = pos + 1
                break
            if ch == "\\":
                if pos + 1 >= n:
                    raise error_at(text, start, "unterminated string")
                esc = text[pos + 1]
                simple = _SIMPLE_ESCAPES.get(esc)
                if simple is not None:
                    parts.append(simple)
                    pos += 2
                    continue
                if esc == "u":
                    hex_m = _HEX4.match(text, pos + 2)
                    if hex_m is None:
                        raise error_at(text, pos, "\\u must be followed by four hex digits")
                    code = int(hex_m.group(), 16)
                    if 0xD800 <= code <= 0xDFFF:
                        raise error_at(text, pos, f"\\u{hex_m.group()} is a lone surrogate")
                    parts.append(chr(code))
                    pos += 6
                    continue
                raise error_at(text, pos, _bad_escape(esc))
            if ch == "\n" or ch == "\t":
                parts.append(ch)
                pos += 1
                continue
            code = ord(ch)
            if 0xD800 <= code <= 0xDFFF:
                raise error_at(text, pos, f"lone surrogate U+{code:04X} in string")
            raise error_at(
                text, pos, f"control character U+{code:04X} in string; write \\u{code:04x}"
            )
        value = "".join(parts)
    if len(value) > MAX_STRING_CHARS:
        raise error_at(text, start, f"string longer than {MAX_STRING_CHARS} characters")
    return value, end


def _bad_escape(esc: str) -> str:
    shown = "\\" + esc if esc.isprintable() else f"backslash before U+{ord(esc):04X}"
    return f"invalid escape {shown} in string; use one of {_ESCAPE_LIST}"


def _bad_atom(text: str, start: int, tok: str, too_deep: bool) -> Form:
    """Raise the error of an atom that is too deep, too long or not printable."""
    if too_deep:
        raise error_at(text, start, _TOO_DEEP)
    if len(tok) > MAX_ATOM_CHARS:
        raise error_at(text, start, f"atom longer than {MAX_ATOM_CHARS} characters")
    for i, ch in enumerate(tok):
        if not ch.isprintable():
            raise error_at(text, start + i, f"character U+{ord(ch):04X} is not allowed in an atom")
    raise AssertionError("unreachable: the atom is valid")


def read_located(text: str, max_depth: int, track: int) -> tuple[list[Form], list[Any]]:
    """Read every form of *text*.

    A form may sit inside at most *max_depth* lists. The second result holds
    the start offsets of the top-level forms; lists are :class:`Located` whose
    ``items`` are tracked the same way while fewer than *track* lists enclose them.
    """
    _check_size(text)
    finditer = _TOKEN.finditer
    top: list[Form] = []
    top_where: list[Any] = []
    items = top
    where: list[Any] | None = top_where
    stack: list[tuple[list[Form], list[Any] | None, int]] = []
    depth = 0
    pos = 0
    resume = True
    while resume:
        resume = False
        # Tokens are contiguous: some alternative matches at every position,
        # so finditer never skips text (a trailing comment included).
        for m in finditer(text, pos):
            kind = m.lastindex
            if kind is None:
                break
            if kind == 1:
                tok = m.group(1)
                if depth > max_depth or len(tok) > MAX_ATOM_CHARS or not tok.isprintable():
                    items.append(_bad_atom(text, m.start(1), tok, depth > max_depth))
                elif tok[0] in "-0123456789" and is_int_text(tok):
                    items.append(int(tok))
                else:
                    items.append(Symbol(tok))
                if where is not None:
                    where.append(m.start(1))
            elif kind == 2:
                if depth > max_depth:
                    raise error_at(text, m.start(2), _TOO_DEEP)
                stack.append((items, where, m.start(2)))
                depth += 1
                items = []
                where = [] if where is not None and depth < track else None
            elif kind == 3:
                if not stack:
                    raise error_at(text, m.start(3), "unexpected ')' with no list open")
                form = tuple(items)
                inner = where
                items, where, open_at = stack.pop()
                depth -= 1
                items.append(form)
                if where is not None:
                    where.append(Located(open_at, inner))
            elif kind == 4:
                value = m.group(4)
                if depth > max_depth or len(value) > MAX_STRING_CHARS:
                    _read_string(text, m.start(4) - 1, depth > max_depth)
                items.append(value)
                if where is not None:
                    where.append(m.start(4) - 1)
            else:
                start = m.start(5)
                if m.group(5) != '"':
                    raise error_at(text, start, "unexpected '\\' outside a string")
                value, pos = _read_string(text, start, depth > max_depth)
                items.append(value)
                if where is not None:
                    where.append(start)
                resume = True
                break
    if stack:
        raise error_at(text, stack[-1][2], "'(' is never closed")
    return top, top_where


_PLAIN_TOKEN = re.compile(
    r"[()]"  # a parenthesis
    r'|"[^"\\\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]*"'  # a string without escapes
    r'|[^\s()";\\]+'  # an atom
    r"|\S"  # anything else that is not a blank: a comment, an escape, a stray quote
)


def read_plain(text: str, max_depth: int) -> list[Form] | None:
    """``read_located(text, max_depth, 0)[0]`` for text in the common shape; None for the rest.

    The common shape: no comment, no escape in a string, nothing too deep, too
    long or unprintable, every list closed. One ``findall`` splits it into tokens
    (the blanks are the only characters it skips), without the located reader's
    match objects and offsets. For any other text, valid or not, it answers None
    and :func:`read_located` decides: the error and its place are that reader's.
    Linear in the text: one pass of a regular expression without backtracking
    between alternatives of different lengths, then one pass over the tokens.
    """
    _check_size(text)
    if "\\" in text:  # an escape, or a stray backslash: decided by read_located
        return None
    top: list[Form] = []
    items = top
    stack: list[list[Form]] = []
    for tok in _PLAIN_TOKEN.findall(text):
        first = tok[0]
        if first == "(":
            if len(stack) > max_depth:
                return None
            stack.append(items)
            items = []
        elif first == ")":
            if not stack:
                return None
            form = tuple(items)
            items = stack.pop()
            items.append(form)
        elif first == '"':
            if len(tok) == 1 or len(stack) > max_depth or len(tok) - 2 > MAX_STRING_CHARS:
                return None
            items.append(tok[1:-1])
        elif first == ";" or first == "\\":
            return None
        elif len(stack) > max_depth or len(tok) > MAX_ATOM_CHARS or not tok.isprintable():
            return None
        elif first in "-0123456789" and is_int_text(tok):
            items.append(int(tok))
        else:
            items.append(Symbol(tok))
    if stack:
        return None
    return top


def read_forms(text: str) -> list[Form]:
    """Read every top-level form of *text*.

    The result holds :class:`~protocol.forms.Symbol`, ``str``, ``int`` and tuples
    nested at most :data:`~protocol.forms.MAX_DEPTH` deep, so every form passes
    :func:`protocol.forms.check_form`. Raises :class:`ParseError` with a line and
    column on any malformed or oversized input, and on nothing else.
    """
    return read_located(text, MAX_DEPTH, 0)[0]


def describe(form: Form) -> str:
    """*form* in a few words for an error message: ``atom x``, ``string "…"``, ``integer 3``."""
    if isinstance(form, Symbol):
        return f"atom {str(form)[:40]}"
    if isinstance(form, str):
        return f"string {quote(form[:40])}"
    if isinstance(form, int):
        return f"integer {form}"
    return "a list"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group()
    return _ESCAPES_OUT.get(ch) or f"\\u{ord(ch):04x}"


def quote(value: str) -> str:
    """*value* as a double-quoted string with its special characters escaped."""
    if _NEEDS_ESCAPE.search(value) is None:
        return f'"{value}"'
    # Backslashes and quotes by replace (a body of JSON text holds many), then the rest.
    text = value.replace("\\", "\\\\").replace('"', '\\"')
    if _CONTROL.search(text) is not None:
        text = _CONTROL.sub(_escape_char, text)
    return '"' + text + '"'


def _is_bare_atom(value: str) -> bool:
    return (
        0 < len(value) <= MAX_ATOM_CHARS
        and _ATOM_TEXT.fullmatch(value) is not None
        and value.isprintable()
        and not (value[0] in "-0123456789" and is_int_text(value))
    )


def emit(form: Form, out: list[str], depth: int) -> None:
    """Append the canonical text of *form*, *depth* lists deep, to *out* (:func:`print_form`)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"forms nest deeper than {MAX_DEPTH} levels")
    if isinstance(form, Symbol):
        if not _is_bare_atom(form):
            raise ValueError(f"not a valid atom: {str(form)[:40]!r}")
        out.append(form)
    elif isinstance(form, str):
        if len(form) > MAX_STRING_CHARS:
            raise ValueError(f"string longer than {MAX_STRING_CHARS} characters")
        if _SURROGATE.search(form) is not None:
            raise ValueError("a string with a lone surrogate cannot be printed")
        out.append(quote(form))
    elif isinstance(form, bool):
        raise TypeError("booleans are not forms; write an atom such as true")
    elif isinstance(form, int):
        digits = str(form)
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(f"integer has more than {MAX_INT_DIGITS} digits")
        out.append(digits)
    elif isinstance(form, tuple):
        out.append("(")
        first = True
        for item in form:
            if not first:
                out.append(" ")
            first = False
            if type(item) is Symbol and depth < MAX_DEPTH and _is_bare_atom(item):
                out.append(item)  # the common case inline: one call less per atom
            else:
                emit(item, out, depth + 1)
        out.append(")")
    else:
        raise TypeError(f"not a form: {type(form).__name__}")


def print_form(form: Form) -> str:
    """The canonical text of *form*: symbols bare, strings quoted and escaped, ints decimal.

    ``read_forms(print_form(f)) == [f]`` for every form that passes
    :func:`protocol.forms.check_form` and holds no lone surrogate; anything
    else raises ``ValueError`` or ``TypeError``.
    """
    out: list[str] = []
    emit(form, out, 0)
    return "".join(out)
