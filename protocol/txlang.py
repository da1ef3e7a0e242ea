"""The S-expression language of context transactions (R6, R7).

Reading turns text into forms (:func:`read_forms`) and a transaction
(:func:`parse_tx`); printing turns them back into canonical text
(:func:`print_form`, :func:`print_tx`). The two directions are inverse:
``parse_tx(print_tx(tx)) == tx`` and ``read_forms(print_form(f)) == [f]``.

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

Every failure is a :class:`~protocol.errors.ParseError` carrying the 1-based
line and column (in characters) of the offending character or form.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

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
from protocol.tx import (
    ENVELOPE_FIELDS,
    MAX_OPS,
    OP_NAMES,
    ContextTx,
    Derive,
    Envelope,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
)

_AnyOp = Derive | Revise | Relate | Unrelate | Retire | Restore | Protect | Unprotect | Envelope

_ENVELOPE_CLAUSES = {name.replace("_", "-"): name for name in ENVELOPE_FIELDS}
"""Clause names of ``(envelope ID …)`` (``valid-from``) and their field names."""

MAX_TEXT_BYTES = 4 << 20
"""Largest transaction text accepted, in UTF-8 bytes (4 MiB)."""

CLAUSE_NAMES = ("base-version", "reason", "client-id")
"""The clauses a ``(context-tx …)`` may hold before its operations."""

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

_FROM = "from"
_TOO_DEEP = f"forms nest deeper than {MAX_DEPTH} levels"


class _Where:
    """Where a list starts in the text, and where its items start (if tracked)."""

    __slots__ = ("offset", "items")

    def __init__(self, offset: int, items: list[Any] | None) -> None:
        self.offset = offset
        self.items = items


def _offset(where: Any) -> int:
    return where.offset if isinstance(where, _Where) else int(where)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - text.rfind("\n", 0, offset)
    return line, column


def _error(text: str, offset: int, message: str) -> ParseError:
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
        raise _error(text, start, _TOO_DEEP)
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
                raise _error(text, start, "unterminated string")
            ch = text[pos]
            if ch == '"':
                end = pos + 1
                break
            if ch == "\\":
                if pos + 1 >= n:
                    raise _error(text, start, "unterminated string")
                esc = text[pos + 1]
                simple = _SIMPLE_ESCAPES.get(esc)
                if simple is not None:
                    parts.append(simple)
                    pos += 2
                    continue
                if esc == "u":
                    hex_m = _HEX4.match(text, pos + 2)
                    if hex_m is None:
                        raise _error(text, pos, "\\u must be followed by four hex digits")
                    code = int(hex_m.group(), 16)
                    if 0xD800 <= code <= 0xDFFF:
                        raise _error(text, pos, f"\\u{hex_m.group()} is a lone surrogate")
                    parts.append(chr(code))
                    pos += 6
                    continue
                raise _error(text, pos, _bad_escape(esc))
            if ch == "\n" or ch == "\t":
                parts.append(ch)
                pos += 1
                continue
            code = ord(ch)
            if 0xD800 <= code <= 0xDFFF:
                raise _error(text, pos, f"lone surrogate U+{code:04X} in string")
            raise _error(
                text, pos, f"control character U+{code:04X} in string; write \\u{code:04x}"
            )
        value = "".join(parts)
    if len(value) > MAX_STRING_CHARS:
        raise _error(text, start, f"string longer than {MAX_STRING_CHARS} characters")
    return value, end


def _bad_escape(esc: str) -> str:
    shown = "\\" + esc if esc.isprintable() else f"backslash before U+{ord(esc):04X}"
    return f"invalid escape {shown} in string; use one of {_ESCAPE_LIST}"


def _bad_atom(text: str, start: int, tok: str, too_deep: bool) -> Form:
    """Raise the error of an atom that is too deep, too long or not printable."""
    if too_deep:
        raise _error(text, start, _TOO_DEEP)
    if len(tok) > MAX_ATOM_CHARS:
        raise _error(text, start, f"atom longer than {MAX_ATOM_CHARS} characters")
    for i, ch in enumerate(tok):
        if not ch.isprintable():
            raise _error(text, start + i, f"character U+{ord(ch):04X} is not allowed in an atom")
    raise AssertionError("unreachable: the atom is valid")


def _read(text: str, max_depth: int, track: int) -> tuple[list[Form], list[Any]]:
    """Read every form of *text*.

    A form may sit inside at most *max_depth* lists. The second result holds
    the start offsets of the top-level forms; lists are :class:`_Where` whose
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
                    raise _error(text, m.start(2), _TOO_DEEP)
                stack.append((items, where, m.start(2)))
                depth += 1
                items = []
                where = [] if where is not None and depth < track else None
            elif kind == 3:
                if not stack:
                    raise _error(text, m.start(3), "unexpected ')' with no list open")
                form = tuple(items)
                inner = where
                items, where, open_at = stack.pop()
                depth -= 1
                items.append(form)
                if where is not None:
                    where.append(_Where(open_at, inner))
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
                    raise _error(text, start, "unexpected '\\' outside a string")
                value, pos = _read_string(text, start, depth > max_depth)
                items.append(value)
                if where is not None:
                    where.append(start)
                resume = True
                break
    if stack:
        raise _error(text, stack[-1][2], "'(' is never closed")
    return top, top_where


def read_forms(text: str) -> list[Form]:
    """Read every top-level form of *text*.

    The result holds :class:`~protocol.forms.Symbol`, ``str``, ``int`` and tuples
    nested at most :data:`~protocol.forms.MAX_DEPTH` deep, so every form passes
    :func:`protocol.forms.check_form`. Raises :class:`ParseError` with a line and
    column on any malformed or oversized input, and on nothing else.
    """
    return _read(text, MAX_DEPTH, 0)[0]


def _describe(form: Form) -> str:
    if isinstance(form, Symbol):
        return f"atom {str(form)[:40]}"
    if isinstance(form, str):
        return f"string {_quote(form[:40])}"
    if isinstance(form, int):
        return f"integer {form}"
    return "a list"


def _validation_message(e: ValidationError) -> str:
    err = e.errors()[0]
    msg = str(err.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


class _TxReader:
    """Turns the forms of one ``(context-tx …)`` into a :class:`ContextTx`."""

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, where: Any, message: str) -> ParseError:
        return _error(self.text, _offset(where), message)

    def atom(self, op: str, form: Form, where: Any, what: str) -> str:
        if not isinstance(form, Symbol):
            raise self.fail(where, f"{op}: {what} must be an atom, got {_describe(form)}")
        return str(form)

    def parse(self) -> ContextTx:
        text = self.text
        forms, wheres = _read(text, MAX_DEPTH + 1, 4)
        if not forms:
            raise _error(text, len(text), "expected (context-tx …), found no form")
        if len(forms) > 1:
            raise self.fail(wheres[1], "unexpected content after the (context-tx …) form")
        tx, tx_where = forms[0], wheres[0]
        if (
            not (isinstance(tx, tuple) and tx and isinstance(tx[0], Symbol))
            or tx[0] != "context-tx"
        ):
            raise self.fail(tx_where, "expected (context-tx …)")
        items = tx_where.items
        fields: dict[str, Any] = {}
        field_where: dict[str, Any] = {}
        ops: list[_AnyOp] = []
        op_wheres: list[Any] = []
        for clause, where in zip(tx[1:], items[1:], strict=True):
            if not (isinstance(clause, tuple) and clause and isinstance(clause[0], Symbol)):
                raise self.fail(
                    where,
                    f"expected a clause or an operation list, got {_describe(clause)}"
                    if not isinstance(clause, tuple)
                    else "a clause or operation starts with its name",
                )
            name = str(clause[0])
            if name in CLAUSE_NAMES:
                if ops:
                    raise self.fail(where, f"({name} …) must come before the first operation")
                key = name.replace("-", "_")
                if key in fields:
                    raise self.fail(where, f"({name} …) appears more than once")
                fields[key] = self.clause(name, clause, where)
                field_where[key] = where
            elif name in OP_NAMES:
                if len(ops) >= MAX_OPS:
                    raise self.fail(where, f"more than {MAX_OPS} operations")
                ops.append(self.operation(name, clause, where))
                op_wheres.append(where)
            else:
                valid = OP_NAMES if ops else CLAUSE_NAMES + OP_NAMES
                raise self.fail(
                    where,
                    f"unknown clause or operation {name!r}; expected one of {', '.join(valid)}",
                )
        if "base_version" not in fields:
            raise self.fail(tx_where, "missing (base-version N)")
        if not ops:
            raise self.fail(tx_where, "a transaction needs at least one operation")
        try:
            return ContextTx(ops=tuple(ops), **fields)
        except ValidationError as e:
            loc = e.errors()[0].get("loc", ())
            key = str(loc[0]) if loc else ""
            if key == "ops" and len(loc) > 1 and isinstance(loc[1], int) and loc[1] < len(ops):
                where = op_wheres[loc[1]]
            else:
                where = field_where.get(key, tx_where)
            label = key.replace("_", "-") if key in field_where else "context-tx"
            raise self.fail(where, f"{label}: {_validation_message(e)}") from e

    def clause(self, name: str, clause: tuple[Form, ...], where: _Where) -> Any:
        args = clause[1:]
        if name == "base-version":
            if len(args) != 1 or not isinstance(args[0], int) or args[0] < 0:
                raise self.fail(where, "base-version takes one non-negative integer")
            return args[0]
        if name == "reason":
            if len(args) != 1 or not isinstance(args[0], str) or isinstance(args[0], Symbol):
                raise self.fail(where, 'reason takes one string: (reason "…")')
            return args[0]
        if len(args) != 1 or isinstance(args[0], tuple):
            raise self.fail(where, 'client-id takes one string or atom: (client-id "…")')
        return str(args[0])

    def operation(self, name: str, form: tuple[Form, ...], where: _Where) -> _AnyOp:
        args = form[1:]
        arg_wheres = where.items[1:] if where.items is not None else [where.offset] * len(args)
        try:
            if name in ("derive", "revise"):
                return self.frame_op(name, args, arg_wheres, where)
            if name == "envelope":
                return self.envelope_op(args, arg_wheres, where)
            if name in ("relate", "unrelate"):
                if len(args) != 3:
                    raise self.fail(where, f"{name} takes three atoms: ({name} A LABEL B)")
                a, label, b = (
                    self.atom(name, f, w, what)
                    for f, w, what in zip(
                        args, arg_wheres, ("the subject", "the label", "the object"), strict=True
                    )
                )
                cls = Relate if name == "relate" else Unrelate
                return cls(subject=a, label=label, object=b)
            if name == "retire":
                if not args:
                    raise self.fail(where, "retire needs at least one reference: (retire REF…)")
                refs = tuple(
                    self.atom(name, f, w, "a reference")
                    for f, w in zip(args, arg_wheres, strict=True)
                )
                return Retire(refs=refs)
            if len(args) != 1:
                what = "REF" if name == "restore" else "ID"
                raise self.fail(where, f"{name} takes exactly one atom: ({name} {what})")
            target = self.atom(name, args[0], arg_wheres[0], "the target")
            if name == "restore":
                return Restore(ref=target)
            return (Protect if name == "protect" else Unprotect)(id=target)
        except ValidationError as e:
            raise self.fail(where, f"{name}: {_validation_message(e)}") from e

    def frame_op(
        self, name: str, args: tuple[Form, ...], arg_wheres: list[Any], where: _Where
    ) -> _AnyOp:
        if not args:
            raise self.fail(where, f"{name} needs a frame id: ({name} ID (from REF…) BODY…)")
        frame_id = self.atom(name, args[0], arg_wheres[0], "the frame id")
        body = args[1:]
        sources: tuple[str, ...] = ()
        if body and _is_from_list(body[0]):
            from_where = arg_wheres[1]
            ref_wheres = (
                from_where.items[1:]
                if isinstance(from_where, _Where) and from_where.items is not None
                else [from_where] * (len(body[0]) - 1)
            )
            sources = tuple(
                self.atom(name, f, w, "a source")
                for f, w in zip(body[0][1:], ref_wheres, strict=True)
            )
            body = body[1:]
        cls = Derive if name == "derive" else Revise
        return cls(id=frame_id, sources=sources, body=body)

    def envelope_op(self, args: tuple[Form, ...], arg_wheres: list[Any], where: _Where) -> Envelope:
        if not args:
            raise self.fail(where, "envelope needs a frame id: (envelope ID (kind K) …)")
        frame_id = self.atom("envelope", args[0], arg_wheres[0], "the frame id")
        fields: dict[str, Any] = {}
        for form, w in zip(args[1:], arg_wheres[1:], strict=True):
            if not (isinstance(form, tuple) and form and isinstance(form[0], Symbol)):
                raise self.fail(w, "envelope: expected a field such as (kind procedural)")
            clause = str(form[0])
            key = _ENVELOPE_CLAUSES.get(clause)
            if key is None:
                raise self.fail(
                    w,
                    f"envelope: unknown field {clause!r}; expected one of "
                    + ", ".join(_ENVELOPE_CLAUSES),
                )
            if key in fields:
                raise self.fail(w, f"envelope: ({clause} …) appears more than once")
            values = form[1:]
            if key == "keys":
                fields[key] = tuple(self.atom("envelope", v, w, "a key") for v in values)
                continue
            if len(values) != 1:
                raise self.fail(w, f"envelope: {clause} takes exactly one value")
            value = values[0]
            if key in ("valid_from", "valid_to"):
                fields[key] = self.time_value(clause, value, w)
            elif key == "reviewed_by":
                if isinstance(value, tuple) or isinstance(value, int):
                    raise self.fail(w, f'envelope: {clause} takes a string: ({clause} "…")')
                fields[key] = str(value)
            else:
                fields[key] = self.atom("envelope", value, w, clause)
        return Envelope(id=frame_id, **fields)

    def time_value(self, clause: str, value: Form, where: Any) -> Any:
        if isinstance(value, Symbol):
            try:
                number = float(value)
            except ValueError:
                raise self.fail(
                    where, f"envelope: {clause} takes an ISO date string or epoch seconds"
                ) from None
            return number
        if isinstance(value, (str, int)):
            return value
        raise self.fail(where, f"envelope: {clause} takes an ISO date string or epoch seconds")


def _print_time(value: float) -> str:
    # Integral seconds print as an integer; others as the shortest exact decimal,
    # an atom that reads back as the same float.
    if value.is_integer():
        return str(int(value))
    return repr(value)


def _is_from_list(form: Form) -> bool:
    return (
        isinstance(form, tuple) and bool(form) and isinstance(form[0], Symbol) and form[0] == _FROM
    )


def parse_tx(text: str) -> ContextTx:
    """Parse the text of exactly one ``(context-tx …)`` into a validated :class:`ContextTx`.

    ``(base-version N)`` must appear once; ``(reason "…")`` and ``(client-id …)``
    at most once each, all before the first operation; then at least one
    operation. Bodies are kept exactly as read. Raises :class:`ParseError`
    (with the line and column of the offending character, clause or operation)
    on any malformed text or invalid transaction, and on nothing else.
    """
    return _TxReader(text).parse()


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group()
    return _ESCAPES_OUT.get(ch) or f"\\u{ord(ch):04x}"


def _quote(value: str) -> str:
    if _NEEDS_ESCAPE.search(value) is None:
        return f'"{value}"'
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, value) + '"'


def _is_bare_atom(value: str) -> bool:
    return (
        0 < len(value) <= MAX_ATOM_CHARS
        and _ATOM_TEXT.fullmatch(value) is not None
        and value.isprintable()
        and not (value[0] in "-0123456789" and is_int_text(value))
    )


def _emit(form: Form, out: list[str], depth: int) -> None:
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
        out.append(_quote(form))
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
            _emit(item, out, depth + 1)
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
    _emit(form, out, 0)
    return "".join(out)


def _print_op(op: _AnyOp) -> str:
    if isinstance(op, (Derive, Revise)):
        out = [f"({op.op} {op.id}"]
        if op.sources or (op.body and _is_from_list(op.body[0])):
            # An empty (from) keeps a body that starts with a from-list from
            # being read back as the sources.
            out.append(" (from" + "".join(" " + s for s in op.sources) + ")")
        for form in op.body:
            out.append(" ")
            _emit(form, out, 1)
        out.append(")")
        return "".join(out)
    if isinstance(op, Relate):  # Unrelate too
        return f"({op.op} {op.subject} {op.label} {op.object})"
    if isinstance(op, Retire):
        return "(retire " + " ".join(op.refs) + ")"
    if isinstance(op, Restore):
        return f"(restore {op.ref})"
    if isinstance(op, (Protect, Unprotect)):
        return f"({op.op} {op.id})"
    if isinstance(op, Envelope):
        out = [f"(envelope {op.id}"]
        for key in ENVELOPE_FIELDS:
            value = getattr(op, key)
            if value is None:
                continue
            clause = key.replace("_", "-")
            if key == "keys":
                out.append(f" ({clause}" + "".join(" " + k for k in value) + ")")
            elif key in ("valid_from", "valid_to"):
                out.append(f" ({clause} {_print_time(value)})")
            elif key == "reviewed_by":
                out.append(f" ({clause} {_print_string(value)})")
            else:
                out.append(f" ({clause} {value})")
        out.append(")")
        return "".join(out)
    raise TypeError(f"not an operation: {type(op).__name__}")


def print_tx(tx: ContextTx) -> str:
    """The canonical multi-line text of *tx*; ``parse_tx(print_tx(tx)) == tx``.

    One clause or operation per line, indented by two spaces, in the order
    base-version, client-id, reason, operations; no trailing newline.
    """
    lines = ["(context-tx", f"  (base-version {tx.base_version})"]
    if tx.client_id is not None:
        lines.append(f"  (client-id {_print_string(tx.client_id)})")
    if tx.reason is not None:
        lines.append(f"  (reason {_print_string(tx.reason)})")
    lines.extend("  " + _print_op(op) for op in tx.ops)
    lines[-1] += ")"
    return "\n".join(lines)


def _print_string(value: str) -> str:
    out: list[str] = []
    _emit(str(value), out, 0)
    return out[0]
