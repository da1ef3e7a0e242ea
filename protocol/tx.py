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
from protocol.forms import Form, Symbol, check_form
from protocol.ids import (
    MAX_CLIENT_ID,
    is_event_id,
    is_event_ref,
    is_frame_id,
    is_label,
    is_ref,
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


FROM = "from"
"""The head of the sources clause, reserved everywhere in a body (see :func:`misplaced_form`)."""

CONTEXT_TX = "context-tx"

OP_NAMES = (
    "derive",
    "revise",
    "relate",
    "unrelate",
    "retire",
    "restore",
    "protect",
    "unprotect",
    "envelope",
)

RESERVED_BODY_HEADS = frozenset({*OP_NAMES, CONTEXT_TX, "base-version", "client-id"})
"""Heads a form directly in a body may not have: an operation or a transaction clause
written there is one whose parenthesis closed too late. Deeper in a body they are content."""


class MisplacedForm(ValueError):
    """A body form the language reserves (:func:`misplaced_form`); ``path`` locates it.

    ``path`` is the index of the form in the body, then its index inside each
    enclosing list, outermost first.
    """

    def __init__(self, message: str, path: tuple[int, ...]) -> None:
        super().__init__(message)
        self.path = path


def _sources_shape(op: str, frame_id: str, refs: tuple[Any, ...]) -> str:
    shown = " ".join(str(r) for r in refs[:4] if isinstance(r, str)) or "REF…"
    if len(refs) > 4:
        shown += " …"
    return f"({op} {frame_id} (from {shown}) BODY…)"


def _is_head(form: Any, names: frozenset[str]) -> bool:
    # Only an atom is a head: ("retire" x), with a string, is content.
    return type(form) is tuple and bool(form) and type(form[0]) is Symbol and form[0] in names


def _near_from(form: Any) -> bool:
    """``(form @e1)``, ``(From @e1)``: a list of references headed by a misspelt ``from``."""
    if not (isinstance(form, tuple) and len(form) > 1) or type(form[0]) is str:
        return False
    head = form[0]
    if not isinstance(head, str) or head == FROM or not 2 <= len(head) <= 6:
        return False
    if not _one_edit(head.lower(), FROM):  # cheap: decides most lists before their items
        return False
    items = form[1:]
    if not all(isinstance(r, str) and type(r) is not str and is_ref(r) for r in items):
        return False
    return any(is_event_ref(r) for r in items)


def _one_edit(a: str, b: str) -> bool:
    """True if *a* equals *b* or is one insertion, deletion, substitution or swap away."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def misplaced_form(
    op: str,
    frame_id: str,
    body: tuple[Any, ...],
    *,
    has_sources: bool,
    sources: tuple[str, ...] = (),
) -> MisplacedForm | None:
    """The first form of *body* (of ``derive``/``revise`` *frame_id*) the language reserves.

    ``None`` when the body is content only. Reserved, so that a misplaced
    clause is an error rather than body text that silently drops its meaning:

    * ``(from …)`` anywhere in the body, at any depth: sources come right after
      the frame id, once (*has_sources*: a sources clause was written there,
      listing *sources*);
    * a list of references headed by a misspelling of ``from`` (``(form @e1)``);
    * an event reference (``@e1``) as the body's first form: a ``(from …)``
      without its parentheses;
    * directly in the body, a list headed by an operation name, ``context-tx``,
      ``base-version`` or ``client-id``.

    Atoms written as strings are content: ``("from" Paris)`` is a body form.
    """
    if not _suspect(body):
        return None
    for i, form in enumerate(body):
        if i == 0 and isinstance(form, str) and type(form) is not str and is_event_ref(form):
            return MisplacedForm(
                f"{form} right after the frame id is a source: write it in (from …):"
                f" {_sources_shape(op, frame_id, (form,))}",
                (i,),
            )
        if _is_head(form, RESERVED_BODY_HEADS):
            head = str(form[0])
            if head == CONTEXT_TX:
                why = "(context-tx …) cannot be inside a body: a text holds one transaction"
            elif head in OP_NAMES:
                why = (
                    f"({head} …) is inside the body of ({op} {frame_id} …): close that"
                    f" operation before it; to keep it as content, wrap it, e.g. (note ({head} …))"
                )
            else:
                why = (
                    f"({head} …) is a clause of the transaction, not body content: it comes"
                    f" before the first operation; to keep it as content, wrap it,"
                    f" e.g. (note ({head} …))"
                )
            return MisplacedForm(why, (i,))
        found = _find_from(form, (i,)) if type(form) is tuple else None
        if found is not None:
            path, bad = found
            if bad[0] != FROM:
                return MisplacedForm(
                    f"({bad[0]} …) looks like a misspelt (from …); sources come right after"
                    f" the frame id: {_sources_shape(op, frame_id, bad[1:])}",
                    path,
                )
            if len(path) == 1 and has_sources:
                message = (
                    f"(from …) appears twice in ({op} {frame_id} …): list every source in the"
                    f" one (from …) right after the frame id:"
                    f" {_sources_shape(op, frame_id, (*sources, *bad[1:]))}"
                )
            else:
                message = (
                    f"(from …) must come right after the frame id:"
                    f" {_sources_shape(op, frame_id, bad[1:])}"
                )
                if len(path) > 1:
                    message += (
                        "; the head from is reserved at any depth in a body: to keep the word,"
                        ' write it as a string, ("from" …)'
                    )
            return MisplacedForm(message, path)
    return None


def _suspect(body: tuple[Any, ...]) -> bool:
    """False if *body* surely holds no reserved form: the cheap pass of every commit."""
    for i, form in enumerate(body):
        if type(form) is tuple:
            if form and type(form[0]) is Symbol and form[0] in RESERVED_BODY_HEADS:
                return True
            if _has_from(form):
                return True
        elif i == 0 and type(form) is Symbol and form.startswith("@"):
            return True
    return False


def _has_from(form: tuple[Any, ...]) -> bool:
    if form:
        head = form[0]
        if type(head) is Symbol and len(head) <= 6 and (head == FROM or _near_from(form)):
            return True
        for item in form:
            if type(item) is tuple and _has_from(item):
                return True
    return False


def _find_from(form: Any, path: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[Any, ...]] | None:
    if not form:
        return None
    head = form[0]
    if type(head) is Symbol and (head == FROM or (2 <= len(head) <= 6 and _near_from(form))):
        return path, form
    for j, item in enumerate(form):
        if type(item) is tuple:
            found = _find_from(item, (*path, j))
            if found is not None:
                return found
    return None


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


Op = Annotated[
    Derive | Revise | Relate | Unrelate | Retire | Restore | Protect | Unprotect | Envelope,
    Field(discriminator="op"),
]

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
