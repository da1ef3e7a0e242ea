"""The wire forms of a transaction (R6): its dict form, in msgpack and in JSON.

Both forms carry the same *dict form* of a transaction (:func:`tx_to_dict`)::

    {"base_version": 12, "reason": "…", "client_id": "…", "text": "(context-tx …)",
     "ops": [{"op": "derive", "id": "test-result", "sources": ["@e42"],
              "body": [["tests", "passed"]]},
             {"op": "relate", "subject": "…", "label": "…", "object": "…"},
             {"op": "retire", "refs": ["@e42"]}, {"op": "restore", "ref": "…"},
             {"op": "protect", "id": "…"},
             {"op": "envelope", "id": "…", "kind": "procedural", "valid_from": 1767225600.0,
              "keys": ["release"], "risk": "medium", "trust": "candidate"},
             {"op": "set", "id": "release", "field": "status", "values": ["blocked"]},
             {"op": "append", "id": "findings", "sources": ["@e7"], "field": "items",
              "values": [{"s": "disk full"}]},
             {"op": "unset", "id": "release", "field": "owner"}, …]}

Body forms use :func:`protocol.forms.to_plain`: symbols are JSON strings,
strings are ``{"s": text}``, lists are lists. ``None`` fields are omitted.
The dict form obeys the rules of the text: a body holds content only (no
``["from", …]`` at any depth, no operation directly in it; see
:func:`protocol.tx.misplaced_form`), a ``revise`` body is not empty, and the
sources are ``sources`` (a ``from`` key is refused, not ignored).

``text`` is optional: the S-expression a transaction was parsed from, when it
was submitted as text. It travels beside the parsed form so that the receiver
logs the text exactly as an embedded commit of the same text would, without
parsing it again (:class:`SubmittedTx`, :func:`submitted_from_msgpack`). The
receiver does not check that the text and the parsed form agree: the text is
the submitter's own account, trusted as far as the submitter is.

The msgpack form is framed by :mod:`protocol.wire` (the version byte, the closed
set of types, the bounds); the JSON form obeys the same bounds and types.

Every decoder raises :class:`~protocol.errors.WireError` on any malformed,
hostile or oversized input, and no other exception.

The format-version byte changes only when a payload an existing decoder accepts
would be read differently. An optional key is added without a new version:
payloads without it decode exactly as before, and a decoder that does not know
it refuses it by name (unknown keys are refused), never misreads it. The
transaction's ``text`` was added that way, so every version-1 payload made
before it still decodes.

Both forms are here, beside the dict form and every check on it, so a check added
to one form cannot be missed by the other.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, cast

from pydantic import ValidationError

from protocol.errors import WireError
from protocol.forms import Symbol, from_plain, to_plain
from protocol.tx import (
    ALL_OP_NAMES,
    ENVELOPE_FIELDS,
    FIELD_EDIT_CLASSES,
    FORMS_CHECKED,
    MAX_OPS,
    MAX_REFS,
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
    new_tx,
)
from protocol.wire import MAX_PAYLOAD_BYTES, SURROGATE, check_plain, decode, encode, json_document

_SOURCES_MISNAMED = ("from", "source")
"""Keys a writer of the dict form may mean as ``sources``; refused with a pointer to it."""

_TX_KEYS = frozenset({"base_version", "reason", "client_id", "ops", "text"})
_OP_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "derive": (frozenset({"id"}), frozenset({"sources", "body"})),
    "revise": (frozenset({"id"}), frozenset({"sources", "body"})),
    "relate": (frozenset({"subject", "label", "object"}), frozenset()),
    "unrelate": (frozenset({"subject", "label", "object"}), frozenset()),
    "retire": (frozenset({"refs"}), frozenset()),
    "restore": (frozenset({"ref"}), frozenset()),
    "protect": (frozenset({"id"}), frozenset()),
    "unprotect": (frozenset({"id"}), frozenset()),
    "envelope": (frozenset({"id"}), frozenset(ENVELOPE_FIELDS)),
    **{
        name: (frozenset({"id", "field"}), frozenset({"sources", "values"}))
        for name in FIELD_EDIT_CLASSES
    },
}


def _plain_body(forms: tuple[Any, ...]) -> list[Any]:
    """``[to_plain(f) for f in forms]``, with the common form types handled inline."""
    out: list[Any] = []
    for form in forms:
        cls = type(form)
        if cls is Symbol:
            out.append(str(form))
        elif cls is tuple:
            out.append(_plain_body(form))
        elif cls is int:
            out.append(form)
        else:
            out.append(to_plain(form))
    return out


def _frame_op_to_dict(op: Derive | Revise) -> dict[str, Any]:
    return {
        "op": op.op,
        "id": op.id,
        "sources": list(op.sources),
        "body": _plain_body(op.body),
    }


def _relate_to_dict(op: Relate) -> dict[str, Any]:  # Unrelate too
    return {"op": op.op, "subject": op.subject, "label": op.label, "object": op.object}


def _retire_to_dict(op: Retire) -> dict[str, Any]:
    return {"op": "retire", "refs": list(op.refs)}


def _restore_to_dict(op: Restore) -> dict[str, Any]:
    return {"op": "restore", "ref": op.ref}


def _protect_to_dict(op: Protect | Unprotect) -> dict[str, Any]:
    return {"op": op.op, "id": op.id}


def _envelope_to_dict(op: Envelope) -> dict[str, Any]:
    out: dict[str, Any] = {"op": "envelope", "id": op.id}
    for key in ENVELOPE_FIELDS:
        value = getattr(op, key)
        if value is not None:
            out[key] = list(value) if key == "keys" else value
    return out


def _field_op_to_dict(op: FieldOp) -> dict[str, Any]:
    out: dict[str, Any] = {"op": op.op, "id": op.id}
    if op.sources:
        out["sources"] = list(op.sources)
    out["field"] = op.field
    if op.values:
        out["values"] = _plain_body(op.values)
    return out


_OP_TO_DICT: dict[type, Any] = {
    **dict.fromkeys(FIELD_EDIT_CLASSES.values(), _field_op_to_dict),
    Derive: _frame_op_to_dict,
    Revise: _frame_op_to_dict,
    Relate: _relate_to_dict,
    Unrelate: _relate_to_dict,
    Retire: _retire_to_dict,
    Restore: _restore_to_dict,
    Protect: _protect_to_dict,
    Unprotect: _protect_to_dict,
    Envelope: _envelope_to_dict,
}
"""The dict form of each operation class, looked up by exact type (the commit log
builds one per logged operation); a subclass goes through :func:`_op_to_dict`."""


def _op_to_dict(op: AnyOp) -> dict[str, Any]:
    if isinstance(op, (Derive, Revise)):
        return _frame_op_to_dict(op)
    if isinstance(op, Relate):  # Unrelate too
        return _relate_to_dict(op)
    if isinstance(op, Retire):
        return _retire_to_dict(op)
    if isinstance(op, Restore):
        return _restore_to_dict(op)
    if isinstance(op, (Protect, Unprotect)):
        return _protect_to_dict(op)
    if isinstance(op, Envelope):
        return _envelope_to_dict(op)
    if isinstance(op, FieldOp):
        return _field_op_to_dict(op)
    raise WireError(f"not an operation: {type(op).__name__}")


class SubmittedTx(NamedTuple):
    """A transaction as it crosses a port: the validated model, and the text it was
    parsed from (``None`` when it was built as a model).

    The log keeps *text* when there is one, so a transaction submitted as text
    is logged the same whichever port carried it. *agent* is who submitted it as
    the port knows it (a context actor: the holder its capability names), kept
    in the log record and in the audit entry of a rejection; never read from
    the payload itself.
    """

    tx: ContextTx
    text: str | None = None
    agent: str | None = None


def tx_to_dict(tx: ContextTx, text: str | None = None) -> dict[str, Any]:
    """The dict form of *tx* (see the module docstring); ``None`` fields are left out.

    With *text* (the S-expression *tx* was parsed from) the form carries it as
    ``text``. ``tx_from_dict(tx_to_dict(tx)) == tx`` and
    ``submitted_from_dict(tx_to_dict(tx, text)) == SubmittedTx(tx, text)``.
    """
    out: dict[str, Any] = {"base_version": tx.base_version}
    if tx.reason is not None:
        out["reason"] = tx.reason
    if tx.client_id is not None:
        out["client_id"] = tx.client_id
    ops = []
    for op in tx.ops:
        to_dict = _OP_TO_DICT.get(type(op))
        ops.append(to_dict(op) if to_dict is not None else _op_to_dict(op))
    out["ops"] = ops
    if text is not None:
        out["text"] = _tx_text(text)
    return out


def _tx_text(value: Any) -> str:
    """*value* if it can be a transaction's text: a non-empty string."""
    if not isinstance(value, str):
        raise WireError(f"text must be a string, got {type(value).__name__}")
    if not value:
        raise WireError("text must not be empty")
    return value


def _validation_message(e: ValidationError) -> str:
    err = e.errors()[0]
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return msg


def _check_keys(
    d: dict[Any, Any], required: frozenset[str], optional: frozenset[str], where: str
) -> None:
    for key in d:
        if not isinstance(key, str):
            raise WireError(f"{where}: keys must be strings, got {type(key).__name__}")
    missing = required - d.keys()
    if missing:
        raise WireError(f"{where}: missing {', '.join(sorted(missing))}")
    extra = d.keys() - required - optional
    if extra:
        raise WireError(f"{where}: unknown key {sorted(extra)[0]!r}")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _texts(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise WireError(f"{where} must be an array, got {type(value).__name__}")
    if len(value) > MAX_REFS:
        raise WireError(f"{where}: more than {MAX_REFS} references")
    return tuple(_text(v, where) for v in value)


_FORMS_CHECKED = {FORMS_CHECKED: True}


def _op_from_dict(value: Any, index: int) -> AnyOp:
    where = f"ops[{index}]"
    if not isinstance(value, dict):
        raise WireError(f"{where}: an operation must be a map, got {type(value).__name__}")
    name = value.get("op")
    if not isinstance(name, str) or name not in _OP_KEYS:
        raise WireError(f"{where}: unknown op {name!r}; expected one of {', '.join(ALL_OP_NAMES)}")
    required, optional = _OP_KEYS[name]
    if "sources" in optional:
        for key in _SOURCES_MISNAMED:
            if key in value:
                # The text's (from …) clause is "sources" here; never drop it as unknown.
                raise WireError(f'{where}: unknown key {key!r}; a frame\'s sources go in "sources"')
    _check_keys(value, required | {"op"}, optional, where)
    where = f"{where} ({name})"
    try:
        if name in ("derive", "revise"):
            body = value.get("body", [])
            if not isinstance(body, (list, tuple)):
                raise WireError(f"{where}: body must be an array, got {type(body).__name__}")
            try:
                forms = tuple(from_plain(form, 1) for form in body)
            except WireError as e:
                raise WireError(f"{where}: body: {e.message}") from e
            cls = Derive if name == "derive" else Revise
            fields = {
                "id": _text(value["id"], f"{where}: id"),
                "sources": _texts(value.get("sources", []), f"{where}: sources"),
                "body": forms,
            }
            # from_plain checked every form: the model need not walk the body again.
            return cls.model_validate(fields, context=_FORMS_CHECKED)
        if name in ("relate", "unrelate"):
            subject, label, obj = (
                _text(value[k], f"{where}: {k}") for k in ("subject", "label", "object")
            )
            cls_edge = Relate if name == "relate" else Unrelate
            return cls_edge(subject=subject, label=label, object=obj)
        if name == "retire":
            return Retire(refs=_texts(value["refs"], f"{where}: refs"))
        if name == "restore":
            return Restore(ref=_text(value["ref"], f"{where}: ref"))
        if name == "envelope":
            return _envelope_from_dict(value, where)
        if name in FIELD_EDIT_CLASSES:
            values = value.get("values", [])
            if not isinstance(values, (list, tuple)):
                raise WireError(f"{where}: values must be an array, got {type(values).__name__}")
            try:
                forms = tuple(from_plain(form, 2) for form in values)
            except WireError as e:
                raise WireError(f"{where}: values: {e.message}") from e
            edit = {
                "id": _text(value["id"], f"{where}: id"),
                "sources": _texts(value.get("sources", []), f"{where}: sources"),
                "field": _text(value["field"], f"{where}: field"),
                "values": forms,
            }
            made = FIELD_EDIT_CLASSES[name].model_validate(edit, context=_FORMS_CHECKED)
            return cast(FieldEdit, made)
        target = _text(value["id"], f"{where}: id")
        return (Protect if name == "protect" else Unprotect)(id=target)
    except ValidationError as e:
        message = _validation_message(e)
        if isinstance(e.errors()[0].get("ctx", {}).get("error"), MisplacedForm):
            message += '; in the dict form a frame\'s sources are its "sources"'
        raise WireError(f"{where}: {message}") from e


def _envelope_from_dict(value: dict[str, Any], where: str) -> Envelope:
    fields: dict[str, Any] = {"id": _text(value["id"], f"{where}: id")}
    for key in ENVELOPE_FIELDS:
        item = value.get(key)
        if item is None:
            continue
        if key == "keys":
            fields[key] = _texts(item, f"{where}: keys")
        elif key in ("valid_from", "valid_to"):
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise WireError(f"{where}: {key} must be epoch seconds (a number)")
            fields[key] = item
        else:
            fields[key] = _text(item, f"{where}: {key}")
    return Envelope(**fields)


def _tx_from_dict(d: Any) -> SubmittedTx:
    if not isinstance(d, dict):
        raise WireError(f"a transaction must be a map, got {type(d).__name__}")
    _check_keys(d, frozenset({"base_version", "ops"}), _TX_KEYS, "transaction")
    base_version = d["base_version"]
    if not isinstance(base_version, int) or isinstance(base_version, bool):
        raise WireError(f"base_version must be an integer, got {type(base_version).__name__}")
    fields: dict[str, Any] = {"base_version": base_version}
    for key in ("reason", "client_id"):
        value = d.get(key)
        if value is not None:
            fields[key] = _text(value, key)
    ops = d["ops"]
    if not isinstance(ops, (list, tuple)):
        raise WireError(f"ops must be an array, got {type(ops).__name__}")
    if len(ops) > MAX_OPS:
        raise WireError(f"more than {MAX_OPS} operations")
    fields["ops"] = tuple(_op_from_dict(op, i) for i, op in enumerate(ops))
    text = d.get("text")
    try:
        tx = new_tx(fields.pop("ops"), **fields)
        return SubmittedTx(tx, None if text is None else _tx_text(text))
    except ValidationError as e:
        loc = e.errors()[0].get("loc", ())
        field = str(loc[0]) if loc else "transaction"
        raise WireError(f"{field}: {_validation_message(e)}") from e


def submitted_from_dict(d: Any) -> SubmittedTx:
    """The validated transaction of a dict form, with the text it carries (or ``None``).

    The rules of :func:`tx_from_dict`; ``text``, when present and not ``None``,
    must be a non-empty string. Raises :class:`WireError`, and no other exception.
    """
    try:
        return _tx_from_dict(d)
    except WireError:
        raise
    except (ValueError, TypeError, LookupError, ArithmeticError, RecursionError) as e:
        raise WireError(f"malformed transaction: {e}") from e


def tx_from_dict(d: Any) -> ContextTx:
    """The validated transaction of a dict form; the inverse of :func:`tx_to_dict`.

    Missing ``reason`` / ``client_id`` (or ``None``) mean absent, missing
    ``sources`` / ``body`` mean empty. Types are checked exactly (no coercion of
    ``"12"`` or ``12.0`` to ``12``), unknown keys are refused; a ``text`` is
    checked and left out (see :func:`submitted_from_dict`). Raises
    :class:`WireError` naming the offending field or operation, and no other exception.
    """
    return submitted_from_dict(d).tx


def tx_to_msgpack(tx: ContextTx, text: str | None = None) -> bytes:
    """The msgpack wire form of *tx*: the version byte, then the msgpack of its dict form.

    With *text*, the payload carries it too (see :func:`submitted_from_msgpack`).
    ``tx_from_msgpack(tx_to_msgpack(tx)) == tx``. Raises :class:`WireError` if
    *tx* holds a string that is not valid Unicode (a lone surrogate).
    """
    return encode(tx_to_dict(tx, text))


def submitted_from_msgpack(data: bytes | bytearray | memoryview) -> SubmittedTx:
    """Decode and validate a transaction made by :func:`tx_to_msgpack`, with its text.

    The text is not parsed: it is returned as sent (``None`` if none was sent).
    Raises :class:`WireError` on a wrong version byte, trailing bytes, extension
    types, oversized or malformed input and invalid transactions; never another
    exception.
    """
    return submitted_from_dict(decode(data))


def tx_from_msgpack(data: bytes | bytearray | memoryview) -> ContextTx:
    """Decode and validate a transaction made by :func:`tx_to_msgpack`.

    Raises :class:`WireError` on a wrong version byte, trailing bytes, extension
    types, oversized or malformed input and invalid transactions; never another
    exception. A text the payload carries is checked and left out.
    """
    return submitted_from_msgpack(data).tx


def tx_to_json(tx: ContextTx, text: str | None = None) -> str:
    """The JSON form of *tx*: its dict form, compact, non-ASCII characters kept as is.

    With *text*, the form carries it too. ``tx_from_json(tx_to_json(tx)) == tx``.
    Raises :class:`WireError` if *tx* or *text* holds a lone surrogate or the
    JSON text would exceed :data:`MAX_PAYLOAD_BYTES`.
    """
    out = json.dumps(tx_to_dict(tx, text), ensure_ascii=False, separators=(",", ":"))
    if SURROGATE.search(out) is not None:
        raise WireError("a string of the transaction holds a lone surrogate")
    if len(out) * 4 > MAX_PAYLOAD_BYTES and len(out.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise WireError(f"JSON text larger than {MAX_PAYLOAD_BYTES} bytes")
    return out


def tx_from_json(text: str | bytes | bytearray | memoryview) -> ContextTx:
    """Decode and validate the JSON form of a transaction (str, or UTF-8 bytes).

    Refuses text over :data:`MAX_PAYLOAD_BYTES`, nesting over
    :data:`MAX_NESTING`, duplicate keys, ``NaN``/``Infinity`` and lone
    surrogates. Raises :class:`WireError` on any failure, and no other exception.
    A transaction text the form carries is checked and left out.
    """
    return submitted_from_json(text).tx


def submitted_from_json(text: str | bytes | bytearray | memoryview) -> SubmittedTx:
    """:func:`tx_from_json`, keeping the transaction text the form carries (or ``None``)."""
    obj = json_document(text)
    check_plain(obj, 0, text_only=True)
    return submitted_from_dict(obj)
