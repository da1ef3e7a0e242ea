"""The context transaction and its operations (R6, R7), as frozen pydantic models.

These models are the one in-memory form of a transaction. The S-expression
text (:mod:`protocol.txlang`), the msgpack wire form and the JSON form
(:mod:`protocol.wire`) all convert to and from them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from protocol.errors import WireError
from protocol.fields import field_key, lifecycle_key, shape_key
from protocol.forms import Form, Symbol, check_form
from protocol.ids import (
    MAX_CLIENT_ID,
    is_event_id,
    is_event_ref,
    is_frame_id,
    is_label,
    is_ref,
)
from protocol.models import trusted
from protocol.reserved import (  # the language's names, re-exported
    ALL_OP_NAMES as ALL_OP_NAMES,
)
from protocol.reserved import (
    CONTEXT_TX as CONTEXT_TX,
)
from protocol.reserved import (
    FIELD_OP_NAMES as FIELD_OP_NAMES,
)
from protocol.reserved import (
    FROM as FROM,
)
from protocol.reserved import (
    OP_NAMES as OP_NAMES,
)
from protocol.reserved import (
    RESERVED_BODY_HEADS as RESERVED_BODY_HEADS,
)
from protocol.reserved import (
    MisplacedForm as MisplacedForm,
)
from protocol.reserved import (
    misplaced_form as misplaced_form,
)

MAX_OPS = 1024
"""Most operations one transaction may hold."""
MAX_REFS = 256
"""Most references one ``from`` or ``retire`` may list."""
MAX_REASON = 4096
MAX_KEYS = 32
"""Most retrieval keys one envelope may hold."""
MAX_TIME = 1e12
"""Valid times are epoch seconds strictly between -MAX_TIME and MAX_TIME."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


def _frame_id(value: str) -> str:
    if isinstance(value, str) and is_frame_id(value):  # never an event: no "@", no ":"
        return value
    if isinstance(value, str) and (is_event_ref(value) or is_event_id(value)):
        raise ValueError(
            f"not a frame id: {value!r} is an event; an operation on a frame names the"
            f" frame's id (e.g. release), and an event is cited in (from {value}) or"
            f" retired with (retire {value})"
        )
    if not isinstance(value, str) or not is_frame_id(value):
        raise ValueError(f"not a frame id: {str(value)[:60]!r}")
    return value


def _ref(value: str) -> str:
    if not isinstance(value, str) or not is_ref(value):
        raise ValueError(f"not a frame id or event reference: {str(value)[:60]!r}")
    return value


def _refs(values: tuple[str, ...]) -> tuple[str, ...]:
    if len(values) > MAX_REFS:
        raise ValueError(f"more than {MAX_REFS} references")
    return tuple(_ref(v) for v in values)


FORMS_CHECKED = "forms_checked"
"""Validation context key: the body's forms were each checked by :func:`check_form` already
(the wire decoder checks every atom as it builds it), so the model does not walk them again."""


def _body(values: tuple[Any, ...], info: ValidationInfo) -> tuple[Form, ...]:
    if info.context and info.context.get(FORMS_CHECKED) is True:
        return values
    try:
        for form in values:
            check_form(form, 1)
    except WireError as e:
        raise ValueError(e.message) from e
    return values


def _check_frame_op(op: Derive | Revise) -> None:
    bad = misplaced_form(op.op, op.id, op.body, has_sources=bool(op.sources), sources=op.sources)
    if bad is not None:
        raise bad


class Derive(_Model):
    """``(derive ID (from REF…) BODY…)``: create frame ID at revision 1.

    The body holds content only (:func:`misplaced_form`): a model built with a
    ``(from …)`` in its body is refused, as the text would be.
    """

    op: Literal["derive"] = "derive"
    id: str
    sources: tuple[str, ...] = ()
    body: tuple[Any, ...] = ()

    _v_id = field_validator("id")(_frame_id)
    _v_sources = field_validator("sources")(_refs)
    _v_body = field_validator("body")(_body)

    @model_validator(mode="after")
    def _v_reserved(self) -> Derive:
        _check_frame_op(self)
        return self


class Revise(_Model):
    """``(revise ID [(from REF…)] BODY…)``: replace the whole body, add sources.

    The body must not be empty (a revise replaces the whole body, so an empty
    one would erase it) and holds content only (:func:`misplaced_form`).
    """

    op: Literal["revise"] = "revise"
    id: str
    sources: tuple[str, ...] = ()
    body: tuple[Any, ...] = ()

    _v_id = field_validator("id")(_frame_id)
    _v_sources = field_validator("sources")(_refs)
    _v_body = field_validator("body")(_body)

    @model_validator(mode="after")
    def _v_reserved(self) -> Revise:
        if not self.body:
            raise MisplacedForm(
                "revise replaces the whole body, and this one is empty: restate the body,"
                f" (revise {self.id} (from REF…) BODY…); sources alone cannot be added",
                (),
            )
        _check_frame_op(self)
        return self


class Relate(_Model):
    """``(relate A LABEL B)``: add the directed edge A —LABEL→ B."""

    op: Literal["relate"] = "relate"
    subject: str
    label: str
    object: str

    _v_ends = field_validator("subject", "object")(_frame_id)

    @field_validator("label")
    @classmethod
    def _v_label(cls, value: str) -> str:
        if not is_label(value):
            raise ValueError(f"not a relation label: {value[:60]!r}")
        return value


class Unrelate(Relate):
    """``(unrelate A LABEL B)``: remove the edge A —LABEL→ B."""

    op: Literal["unrelate"] = "unrelate"  # type: ignore[assignment]


class Retire(_Model):
    """``(retire REF…)``: retire observations now, frames through their window (R11–R17)."""

    op: Literal["retire"] = "retire"
    refs: tuple[str, ...]

    @field_validator("refs")
    @classmethod
    def _v_refs(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        if not values:
            raise ValueError("retire needs at least one reference")
        return _refs(values)


class Restore(_Model):
    """``(restore REF)``: bring a frame or observation back to active; cancels a retirement."""

    op: Literal["restore"] = "restore"
    ref: str

    _v_ref = field_validator("ref")(_ref)


class Protect(_Model):
    """``(protect ID)``: cancel any pending retirement and protect the frame."""

    op: Literal["protect"] = "protect"
    id: str

    _v_id = field_validator("id")(_frame_id)


class Unprotect(_Model):
    """``(unprotect ID)``: remove the protection of a frame."""

    op: Literal["unprotect"] = "unprotect"
    id: str

    _v_id = field_validator("id")(_frame_id)


def valid_time(value: Any) -> float:
    """Epoch seconds of an ISO date/date-time (UTC unless it says otherwise) or a number.

    Raises ``ValueError`` for anything else, for NaN/infinity and beyond ±1e12.
    """
    if isinstance(value, bool):
        raise ValueError("a valid time is an ISO date or epoch seconds, not a boolean")
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"not an ISO date or date-time: {value[:60]!r} (e.g. 2026-01-01)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        t = when.timestamp()
    elif isinstance(value, (int, float)):
        t = float(value)
    else:
        raise ValueError(f"a valid time is an ISO date or epoch seconds, not {value!r}")
    if not math.isfinite(t) or not -MAX_TIME < t < MAX_TIME:
        raise ValueError(f"valid time out of range: {value!r}")
    return t


def _label_text(value: str) -> str:
    if not isinstance(value, str) or not is_label(value):
        raise ValueError(f"not an atom: {str(value)[:60]!r}")
    return value


class Envelope(_Model):
    """``(envelope ID (kind K) (valid-from T) (valid-to T) (keys A…) (risk R) (trust T) …)``.

    Sets the governance envelope (R41) of an existing frame; every field is
    optional and ``None`` leaves it unchanged. Valid times are normalized to
    epoch seconds. ``reviewed_by`` and every trust but ``candidate`` parse, but
    only the runtime may set them: a model transaction doing so is rejected
    ``not_permitted``.
    """

    op: Literal["envelope"] = "envelope"
    id: str
    kind: Literal["working", "episodic", "semantic", "procedural", "meta"] | None = None
    tenant: str | None = None
    project: str | None = None
    valid_from: float | None = None
    valid_to: float | None = None
    keys: tuple[str, ...] | None = None
    risk: Literal["low", "medium", "high"] | None = None
    trust: Literal["candidate", "accepted", "rejected", "retired", "quarantined"] | None = None
    reviewed_by: str | None = Field(default=None, min_length=1, max_length=MAX_REASON)

    _v_id = field_validator("id")(_frame_id)

    @field_validator("tenant", "project")
    @classmethod
    def _v_scope(cls, value: str | None) -> str | None:
        return None if value is None else _label_text(value)

    @field_validator("valid_from", "valid_to", mode="before")
    @classmethod
    def _v_time(cls, value: Any) -> float | None:
        return None if value is None else valid_time(value)

    @field_validator("keys")
    @classmethod
    def _v_keys(cls, values: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if values is None:
            return None
        if len(values) > MAX_KEYS:
            raise ValueError(f"more than {MAX_KEYS} retrieval keys")
        return tuple(_label_text(v) for v in values)

    @model_validator(mode="after")
    def _v_order(self) -> Envelope:
        if (
            self.valid_from is not None
            and self.valid_to is not None
            and self.valid_to < self.valid_from
        ):
            raise ValueError("valid-to is before valid-from")
        return self


def _field_name(value: str) -> str:
    if not isinstance(value, str) or not is_label(value):
        raise ValueError(f"not a field name (an atom): {str(value)[:60]!r}")
    if value == FROM:
        raise ValueError("from cannot name a field: it is the sources clause")
    return value


class FieldOp(_Model):
    """One edit of one field of a keyed body (:mod:`protocol.fields`).

    ``values`` are the forms after the field name. The field as it would be
    written, ``(FIELD values…)``, obeys the body rules (:func:`misplaced_form`).
    """

    op: str
    id: str
    sources: tuple[str, ...] = ()
    field: str
    values: tuple[Any, ...] = ()

    _v_id = field_validator("id")(_frame_id)
    _v_sources = field_validator("sources")(_refs)
    _v_field = field_validator("field")(_field_name)

    @field_validator("values")
    @classmethod
    def _v_values(cls, values: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        if info.context and info.context.get(FORMS_CHECKED) is True:
            return values
        try:
            for form in values:
                check_form(form, 2)  # inside the field's list, inside the body
        except WireError as e:
            raise ValueError(e.message) from e
        return values

    @model_validator(mode="after")
    def _v_shape(self) -> FieldOp:
        self._check_values()
        form = (Symbol(self.field), *self.values)
        bad = misplaced_form(self.op, self.id, (form,), has_sources=bool(self.sources))
        if bad is not None:
            raise bad
        return self

    def _check_values(self) -> None:
        """Raise ``ValueError`` if ``values`` do not fit this edit."""


class SetField(FieldOp):
    """``(set ID [(from REF…)] (FIELD VALUE…))``: replace one field (add it if missing)."""

    op: Literal["set"] = "set"


class AppendField(FieldOp):
    """``(append ID [(from REF…)] (FIELD ITEM…))``: add items at the end of one field."""

    op: Literal["append"] = "append"

    def _check_values(self) -> None:
        if not self.values:
            raise ValueError(f"append needs at least one item: (append {self.id} (FIELD ITEM…))")


class RemoveField(FieldOp):
    """``(remove ID [(from REF…)] (FIELD ITEM…))``: remove every occurrence of the items."""

    op: Literal["remove"] = "remove"

    def _check_values(self) -> None:
        if not self.values:
            raise ValueError(f"remove needs at least one item: (remove {self.id} (FIELD ITEM…))")


class IncrField(FieldOp):
    """``(incr ID [(from REF…)] (FIELD N))``: add the integer N to the field's one integer."""

    op: Literal["incr"] = "incr"

    def _check_values(self) -> None:
        if len(self.values) != 1 or type(self.values[0]) is not int:
            raise ValueError(f"incr takes one integer: (incr {self.id} ({self.field} 1))")


class UnsetField(FieldOp):
    """``(unset ID [(from REF…)] FIELD)``: remove one field (a missing one is not an error)."""

    op: Literal["unset"] = "unset"

    def _check_values(self) -> None:
        if self.values:
            raise ValueError(f"unset takes a field name only: (unset {self.id} {self.field})")


FieldEdit = SetField | AppendField | RemoveField | IncrField | UnsetField
"""Any of the field edits."""

FIELD_EDIT_CLASSES: dict[str, type[FieldOp]] = {
    "set": SetField,
    "append": AppendField,
    "remove": RemoveField,
    "incr": IncrField,
    "unset": UnsetField,
}
"""The model class of each field edit, by operation name."""


AnyOp = (
    Derive
    | Revise
    | Relate
    | Unrelate
    | Retire
    | Restore
    | Protect
    | Unprotect
    | Envelope
    | FieldEdit
)
"""Every operation of a transaction: the one list the parser, the printer and the wire
forms dispatch over."""

Op = Annotated[AnyOp, Field(discriminator="op")]

ENVELOPE_FIELDS = (
    "kind",
    "tenant",
    "project",
    "valid_from",
    "valid_to",
    "keys",
    "risk",
    "trust",
    "reviewed_by",
)
"""The fields of :class:`Envelope`, in printing order."""


class ContextTx(_Model):
    """A context transaction: a base version, an optional reason and client id, and ops.

    ``client_id`` makes a submission idempotent (R25): resubmitting a committed
    transaction with the same client id returns the original receipt.
    """

    base_version: int = Field(ge=0, lt=1 << 63)
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    client_id: str | None = Field(default=None, min_length=1, max_length=MAX_CLIENT_ID)
    ops: tuple[Op, ...] = Field(min_length=1, max_length=MAX_OPS)

    def footprint(self) -> tuple[frozenset[str], frozenset[str]]:
        """The keys this transaction references (R22), as ``(reads, writes)``.

        Keys are ``f:<frame id>``, ``e:<event ref>`` and ``r:<subject>\\x00<label>\\x00<object>``.
        Writes are operation targets; reads are ``from`` sources and relation endpoints.
        A field edit (:mod:`protocol.fields`) reads its frame's lifecycle key and, for
        ``set`` and ``unset``, its field's key and the body's shape key; it writes no
        whole-frame key, so it conflicts only as :data:`~protocol.fields.EDIT_CHECKS_FIELD`
        says.
        """
        reads: set[str] = set()
        writes: set[str] = set()
        for op in self.ops:
            if isinstance(op, FieldOp):
                reads.update(field_edit_keys(op))
                reads.update(ref_key(r) for r in op.sources)
            elif isinstance(op, (Derive, Revise)):
                writes.add("f:" + op.id)
                reads.update(ref_key(r) for r in op.sources)
            elif isinstance(op, Relate):  # Unrelate too
                writes.add(edge_key(op.subject, op.label, op.object))
                reads.add("f:" + op.subject)
                reads.add("f:" + op.object)
            elif isinstance(op, Retire):
                writes.update(ref_key(r) for r in op.refs)
            elif isinstance(op, Restore):
                writes.add(ref_key(op.ref))
            else:
                writes.add("f:" + op.id)
        return frozenset(reads - writes), frozenset(writes)


_OP_CLASSES = frozenset(
    {Derive, Revise, Relate, Unrelate, Retire, Restore, Protect, Unprotect, Envelope}
    | set(FIELD_EDIT_CLASSES.values())
)
_TX_FIELDS = frozenset({"base_version", "reason", "client_id"})


def new_tx(ops: tuple[AnyOp, ...], **fields: Any) -> ContextTx:
    """``ContextTx(ops=ops, **fields)``: the same model, or the same ``ValidationError``.

    pydantic looks every operation up in its union again although each is a model
    already, which costs more than all the other checks of a transaction. When every
    operation is an instance of its own operation class (validated when it was made)
    and each field is of its exact type and within its bounds, the model is constructed
    without that pass; anything else is validated as usual.
    """
    base = fields.get("base_version")
    reason = fields.get("reason")
    client_id = fields.get("client_id")
    if (
        type(base) is int
        and 0 <= base < 1 << 63
        and (reason is None or (type(reason) is str and len(reason) <= MAX_REASON))
        and (client_id is None or (type(client_id) is str and 1 <= len(client_id) <= MAX_CLIENT_ID))
        and type(ops) is tuple
        and 1 <= len(ops) <= MAX_OPS
        and _TX_FIELDS.issuperset(fields)
        and all(type(op) in _OP_CLASSES for op in ops)
    ):
        values = {"base_version": base, "reason": reason, "client_id": client_id, "ops": ops}
        return trusted(ContextTx, values, ("ops", *fields))
    return ContextTx(ops=ops, **fields)


def field_edit_keys(op: FieldOp) -> tuple[str, ...]:
    """The keys whose change after the base refuses the field edit *op*."""
    if op.op in ("set", "unset"):
        return (lifecycle_key(op.id), field_key(op.id, op.field), shape_key(op.id))
    return (lifecycle_key(op.id),)


def ref_key(ref: str) -> str:
    """The footprint key of a frame id or event reference."""
    return ("e:" if is_event_ref(ref) else "f:") + ref


def edge_key(subject: str, label: str, obj: str) -> str:
    """The footprint key of one relation edge."""
    return f"r:{subject}\x00{label}\x00{obj}"


def key_display(key: str) -> str:
    """A footprint key as a person reads it: ``release``, ``@e42``, ``a supports b``."""
    kind, rest = key[:2], key[2:]
    if kind == "r:":
        return " ".join(rest.split("\x00"))
    if kind == "b:":
        return rest.partition("\x00")[0]
    return rest
