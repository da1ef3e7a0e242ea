"""The transaction language: the grammar of ``(context-tx …)`` over forms (R6, R7).

:func:`parse_tx` reads the text of one transaction into a validated
:class:`~protocol.tx.ContextTx`; :func:`print_tx` prints one back as canonical
text, and ``parse_tx(print_tx(tx)) == tx``. The forms underneath — atoms,
strings, integers and lists, their lexical rules and their canonical printing —
are read and printed by :mod:`protocol.sexpr`.

Every failure is a :class:`~protocol.errors.ParseError` carrying the 1-based
line and column (in characters) of the offending character, clause or
operation.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import ValidationError

from protocol.errors import ParseError
from protocol.forms import MAX_DEPTH, Form, Symbol
from protocol.sexpr import Located, describe, emit, error_at, offset_of, read_located, read_plain
from protocol.tx import (
    ALL_OP_NAMES,
    ENVELOPE_FIELDS,
    FIELD_EDIT_CLASSES,
    FROM,
    MAX_OPS,
    AnyOp,
    ContextTx,
    Derive,
    Envelope,
    FieldEdit,
    FieldOp,
    MisplacedForm,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
    UnsetField,
    misplaced_form,
    new_tx,
)

_ENVELOPE_CLAUSES = {name.replace("_", "-"): name for name in ENVELOPE_FIELDS}
"""Clause names of ``(envelope ID …)`` (``valid-from``) and their field names."""


CLAUSE_NAMES = ("base-version", "reason", "client-id")
"""The clauses a ``(context-tx …)`` may hold before its operations."""


def _validation_message(e: ValidationError) -> str:
    err = e.errors()[0]
    msg = str(err.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


class _Unlocated(Exception):
    """An error found by a reader without locations: the text is read again with them."""


class _TxReader:
    """Turns the forms of one ``(context-tx …)`` into a :class:`ContextTx`.

    Where a location is None (forms read by :func:`~protocol.sexpr.read_plain`, which
    keeps none), an error raises :class:`_Unlocated` instead, and :func:`parse_tx`
    reads the text again with locations: the error is the same either way.
    """

    def __init__(self, text: str, *, legacy: bool = False) -> None:
        self.text = text
        self.legacy = legacy
        self.clause_index = 0

    def fail(self, where: Any, message: str) -> ParseError:
        if where is None:
            raise _Unlocated
        return error_at(self.text, offset_of(where), message)

    def atom(self, op: str, form: Form, where: Any, what: str) -> str:
        if not isinstance(form, Symbol):
            raise self.fail(where, f"{op}: {what} must be an atom, got {describe(form)}")
        return str(form)

    def parse(self) -> ContextTx:
        """Read the text with locations and build the transaction."""
        forms, wheres = read_located(self.text, MAX_DEPTH + 1, 4)
        return self.build(forms, wheres)

    def build(self, forms: list[Form], wheres: list[Any] | None) -> ContextTx:
        """The transaction *forms* hold; *wheres* are their locations, None if unknown."""
        text = self.text
        if not forms:
            raise error_at(text, len(text), "expected (context-tx …), found no form")
        if len(forms) > 1:
            where = None if wheres is None else wheres[1]
            raise self.fail(where, "unexpected content after the (context-tx …) form")
        tx = forms[0]
        tx_where: Any = None if wheres is None else wheres[0]
        if (
            not (isinstance(tx, tuple) and tx and isinstance(tx[0], Symbol))
            or tx[0] != "context-tx"
        ):
            raise self.fail(tx_where, "expected (context-tx …)")
        items = tx_where.items[1:] if tx_where is not None else [None] * (len(tx) - 1)
        fields: dict[str, Any] = {}
        field_where: dict[str, Any] = {}
        ops: list[AnyOp] = []
        op_wheres: list[Any] = []
        for index, (clause, where) in enumerate(zip(tx[1:], items, strict=True)):
            self.clause_index = index + 1
            if not (isinstance(clause, tuple) and clause and isinstance(clause[0], Symbol)):
                raise self.fail(
                    where,
                    f"expected a clause or an operation list, got {describe(clause)}"
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
            elif name in ALL_OP_NAMES:
                if len(ops) >= MAX_OPS:
                    raise self.fail(where, f"more than {MAX_OPS} operations")
                ops.append(self.operation(name, clause, where))
                op_wheres.append(where)
            else:
                valid = ALL_OP_NAMES if ops else CLAUSE_NAMES + ALL_OP_NAMES
                raise self.fail(
                    where,
                    f"unknown clause or operation {name!r}; expected one of {', '.join(valid)}",
                )
        if "base_version" not in fields:
            raise self.fail(tx_where, "missing (base-version N)")
        if not ops:
            raise self.fail(tx_where, "a transaction needs at least one operation")
        try:
            return new_tx(tuple(ops), **fields)
        except ValidationError as e:
            if self.legacy and isinstance(e.errors()[0].get("ctx", {}).get("error"), MisplacedForm):
                # The ops were read leniently above; the transaction was valid when logged.
                return ContextTx.model_construct(ops=tuple(ops), **fields)
            loc = e.errors()[0].get("loc", ())
            key = str(loc[0]) if loc else ""
            if key == "ops" and len(loc) > 1 and isinstance(loc[1], int) and loc[1] < len(ops):
                where = op_wheres[loc[1]]
            else:
                where = field_where.get(key, tx_where)
            label = key.replace("_", "-") if key in field_where else "context-tx"
            raise self.fail(where, f"{label}: {_validation_message(e)}") from e

    def clause(self, name: str, clause: tuple[Form, ...], where: Located | None) -> Any:
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

    def operation(self, name: str, form: tuple[Form, ...], where: Located | None) -> AnyOp:
        args = form[1:]
        arg_wheres: list[Any]
        if where is None:
            arg_wheres = [None] * len(args)
        elif where.items is not None:
            arg_wheres = where.items[1:]
        else:
            arg_wheres = [where.offset] * len(args)
        try:
            if name in ("derive", "revise"):
                return self.frame_op(name, args, arg_wheres, where)
            if name == "envelope":
                return self.envelope_op(args, arg_wheres, where)
            if name in FIELD_EDIT_CLASSES:
                return self.field_op(name, args, arg_wheres, where)
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
        self, name: str, args: tuple[Form, ...], arg_wheres: list[Any], where: Located | None
    ) -> AnyOp:
        shape = f"({name} ID (from REF…) BODY…)"
        if not args:
            raise self.fail(where, f"{name} needs a frame id: {shape}")
        if _is_from_list(args[0]):
            refs = " ".join(str(r) for r in args[0][1:] if isinstance(r, str)) or "REF…"
            raise self.fail(
                arg_wheres[0],
                f"{name}: (from …) comes after the frame id: ({name} ID (from {refs}) BODY…)",
            )
        if not isinstance(args[0], Symbol):
            raise self.fail(
                arg_wheres[0],
                f"{name}: the frame id must be an atom, got {describe(args[0])}: {shape}",
            )
        frame_id = str(args[0])
        body = args[1:]
        sources: tuple[str, ...] = ()
        has_from = bool(body) and _is_from_list(body[0])
        if has_from:
            sources = self.sources(name, body[0], arg_wheres[1])
            body = body[1:]
        cls = Derive if name == "derive" else Revise
        try:
            return cls(id=frame_id, sources=sources, body=body)
        except ValidationError as e:
            bad = e.errors()[0].get("ctx", {}).get("error")
            if not isinstance(bad, MisplacedForm):
                raise
            if self.legacy:
                # A record logged before the reserved-form rule: replay it as it was
                # committed (the form stays body content), never refuse history.
                return cls.model_construct(id=frame_id, sources=sources, body=body)
            if bad.path:
                # The model knows whether sources were listed, not whether an empty
                # (from) was written: ask again with what the text holds.
                again = misplaced_form(name, frame_id, body, has_sources=has_from, sources=sources)
                bad = again or bad
            raise self.fail(self.locate(bad.path, 2 + has_from, where), str(bad)) from None

    def sources(self, name: str, from_list: tuple[Form, ...], from_where: Any) -> tuple[str, ...]:
        """The references of a ``(from REF…)`` list, each checked as an atom where it stands."""
        ref_wheres = (
            from_where.items[1:]
            if isinstance(from_where, Located) and from_where.items is not None
            else [from_where] * (len(from_list) - 1)
        )
        return tuple(
            self.atom(name, f, w, "a source")
            for f, w in zip(from_list[1:], ref_wheres, strict=True)
        )

    def field_op(
        self, name: str, args: tuple[Form, ...], arg_wheres: list[Any], where: Located | None
    ) -> FieldEdit:
        shape = (
            f"({name} ID [(from REF…)] FIELD)"
            if name == "unset"
            else f"({name} ID [(from REF…)] (FIELD VALUE…))"
        )
        if not args or not isinstance(args[0], Symbol):
            raise self.fail(where, f"{name} needs a frame id first: {shape}")
        frame_id = str(args[0])
        rest, rest_wheres = args[1:], arg_wheres[1:]
        sources: tuple[str, ...] = ()
        if rest and _is_from_list(rest[0]):
            sources = self.sources(name, rest[0], rest_wheres[0])
            rest, rest_wheres = rest[1:], rest_wheres[1:]
        if len(rest) != 1:
            raise self.fail(where, f"{name} edits exactly one field: {shape}")
        form = rest[0]
        cls = FIELD_EDIT_CLASSES[name]
        if cls is UnsetField:
            field = self.atom(name, form, rest_wheres[0], "the field name")
            values: tuple[Form, ...] = ()
        else:
            if not (isinstance(form, tuple) and form and isinstance(form[0], Symbol)):
                raise self.fail(
                    rest_wheres[0], f"{name}: the field is a list headed by its name: {shape}"
                )
            field, values = str(form[0]), form[1:]
        edit = cls.model_validate(
            {"id": frame_id, "sources": sources, "field": field, "values": values}
        )
        return cast(FieldEdit, edit)

    def locate(self, path: tuple[int, ...], first: int, where: Located | None) -> Any:
        """Where the body form at *path* starts; *first* is the body's index in the op list.

        Lists deep in a body are not tracked on the fast path, so the text is read
        again, tracking every list (this happens only on the way to an error).
        """
        if not path:
            return where
        _, wheres = read_located(self.text, MAX_DEPTH + 1, MAX_DEPTH + 3)
        at: Any = wheres[0].items[self.clause_index].items[first + path[0]]
        for j in path[1:]:
            at = at.items[j]
        return at

    def envelope_op(
        self, args: tuple[Form, ...], arg_wheres: list[Any], where: Located | None
    ) -> Envelope:
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
        isinstance(form, tuple) and bool(form) and isinstance(form[0], Symbol) and form[0] == FROM
    )


def parse_tx(text: str, *, legacy: bool = False) -> ContextTx:
    """Parse the text of exactly one ``(context-tx …)`` into a validated :class:`ContextTx`.

    ``(base-version N)`` must appear once; ``(reason "…")`` and ``(client-id …)``
    at most once each, all before the first operation; then at least one
    operation. Bodies are kept exactly as read. Raises :class:`ParseError`
    (with the line and column of the offending character, clause or operation)
    on any malformed text or invalid transaction, and on nothing else.

    ``legacy=True`` is for re-reading the commit log: a record committed before a
    form was reserved in bodies (``(from …)`` out of place, an empty ``revise``)
    reads back exactly as it was committed instead of failing. Never use it for
    new input.
    """
    forms = read_plain(text, MAX_DEPTH + 1)
    if forms is not None:  # the common shape: read without locations, found only on error
        try:
            return _TxReader(text, legacy=legacy).build(forms, None)
        except _Unlocated:
            pass
    return _TxReader(text, legacy=legacy).parse()


def _print_op(op: AnyOp) -> str:
    if isinstance(op, (Derive, Revise)):
        out = [f"({op.op} {op.id}"]
        if op.sources:
            out.append(" (from" + "".join(" " + s for s in op.sources) + ")")
        for form in op.body:
            out.append(" ")
            emit(form, out, 1)
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
    if isinstance(op, FieldOp):
        out = [f"({op.op} {op.id}"]
        if op.sources:
            out.append(" (from" + "".join(" " + s for s in op.sources) + ")")
        if isinstance(op, UnsetField):
            out.append(f" {op.field})")
            return "".join(out)
        out.append(f" ({op.field}")
        for form in op.values:
            out.append(" ")
            emit(form, out, 2)
        out.append("))")
        return "".join(out)
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
    emit(str(value), out, 0)
    return out[0]
