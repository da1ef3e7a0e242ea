"""The context transaction and its operations (R6, R7), as frozen pydantic models.

These models are the one in-memory form of a transaction. The S-expression
text (:mod:`protocol.txlang`), the msgpack wire form and the JSON form
(:mod:`protocol.wire`) all convert to and from them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from protocol.errors import WireError
from protocol.forms import Form, check_form
from protocol.ids import MAX_CLIENT_ID, is_event_ref, is_frame_id, is_label, is_ref

MAX_OPS = 1024
"""Most operations one transaction may hold."""
MAX_REFS = 256
"""Most references one ``from`` or ``retire`` may list."""
MAX_REASON = 4096


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


def _frame_id(value: str) -> str:
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


def _body(values: tuple[Any, ...]) -> tuple[Form, ...]:
    try:
        for form in values:
            check_form(form, 1)
    except WireError as e:
        raise ValueError(e.message) from e
    return values


class Derive(_Model):
    """``(derive ID (from REF…) BODY…)``: create frame ID at revision 1."""

    op: Literal["derive"] = "derive"
    id: str
    sources: tuple[str, ...] = ()
    body: tuple[Any, ...] = ()

    _v_id = field_validator("id")(_frame_id)
    _v_sources = field_validator("sources")(_refs)
    _v_body = field_validator("body")(_body)


class Revise(_Model):
    """``(revise ID [(from REF…)] BODY…)``: replace the whole body, add sources."""

    op: Literal["revise"] = "revise"
    id: str
    sources: tuple[str, ...] = ()
    body: tuple[Any, ...] = ()

    _v_id = field_validator("id")(_frame_id)
    _v_sources = field_validator("sources")(_refs)
    _v_body = field_validator("body")(_body)


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


Op = Annotated[
    Derive | Revise | Relate | Unrelate | Retire | Restore | Protect | Unprotect,
    Field(discriminator="op"),
]

OP_NAMES = ("derive", "revise", "relate", "unrelate", "retire", "restore", "protect", "unprotect")


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
        """
        reads: set[str] = set()
        writes: set[str] = set()
        for op in self.ops:
            if isinstance(op, (Derive, Revise)):
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
    return rest
