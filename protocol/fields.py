"""Fields of a frame body, and the edits that change one field (docs/language.md, "Fields").

A body whose top-level forms are each a list headed by an atom, every head
different, is **keyed**: ``(status blocked) (owner alice) (tasks "t1" "t2")``
holds the fields ``status``, ``owner`` and ``tasks``, each a list of values
(the forms after the head). Any other body is not keyed and keeps the
whole-body meaning: only ``revise`` changes it.

Five edits change one field of a keyed body (the operations ``set``,
``append``, ``remove``, ``incr`` and ``unset`` of :mod:`protocol.tx`):

* :func:`apply_edit` applies one to a body and returns the new body, or
  raises :class:`FieldError` with a stable code;
* :data:`EDIT_CHECKS_FIELD` says which edits conflict with a concurrent
  change to their field (``set``, ``unset``) and which commute with every
  concurrent change to the frame's fields (``append``, ``remove``, ``incr``):
  the predicate the engine applies between an edit and what changed since
  its base (:func:`field_key`, :func:`shape_key`);
* :func:`changed_fields` is what a whole-body write (``derive``,
  ``revise``) changed, so a later ``set`` knows whether its field moved.

Everything here is a function of its arguments; cost is linear in the number
of fields plus, for ``remove``, the length of the one field edited.
:func:`apply_indexed` takes and returns the body's field index, so a transaction
editing one frame many times reads its fields once, and :func:`edit_work` is
what one edit costs, counted in forms: a transaction's field edits together may
cost at most :data:`MAX_EDIT_WORK` (``work_limit``), so a short transaction
cannot make the single writer copy a huge body a thousand times.
"""

from __future__ import annotations

from typing import Any

from protocol.forms import Form, Symbol

INCR_MIN = -(1 << 63)
INCR_MAX = (1 << 63) - 1
"""``incr`` keeps a counter in the signed 64-bit range; a result outside it is refused."""

FIELD_OPS = ("set", "append", "remove", "incr", "unset")
"""The operations that edit one field of a keyed body."""

MAX_EDIT_WORK = 1 << 25
"""Most forms the field edits of one transaction may copy, summed over its edits
(:func:`edit_work`): 32 Mi, about half a second of copying. One edit of the
largest body a transaction can write fits many times over; a thousand edits of a
body of 200,000 fields (15 kB of text that took two minutes of the writer's time
before this bound) are refused ``work_limit`` instead."""

EDIT_CHECKS_FIELD = {"set": True, "unset": True, "append": False, "remove": False, "incr": False}
"""Whether an edit is refused (``conflict``) when its field changed after the base version.

``set`` and ``unset`` replace what the writer read, so a concurrent change to the same
field would be lost: they conflict. ``append``, ``remove`` and ``incr`` are applied to the
field as it stands at commit and commute with each other and with changes to other fields:
they are never refused for concurrency."""


class FieldError(Exception):
    """An edit that cannot apply to this body: a stable *code* and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def field_key(frame_id: str, name: str) -> str:
    """The footprint key of field *name* of frame *frame_id* (changed by writes to it)."""
    return f"b:{frame_id}\x00{name}"


def shape_key(frame_id: str) -> str:
    """The footprint key changed when a body is rewritten as a whole without keyed fields
    (before or after): every field of the frame counts as changed."""
    return f"b:{frame_id}\x00"


def lifecycle_key(frame_id: str) -> str:
    """The footprint key changed when a frame's lifecycle or protection changes."""
    return f"l:{frame_id}"


def field_index(body: tuple[Form, ...]) -> dict[str, int] | None:
    """Each field's name and position in *body*; None if the body is not keyed."""
    out: dict[str, int] = {}
    for i, form in enumerate(body):
        if type(form) is not tuple or not form or not isinstance(form[0], Symbol):
            return None
        name = str(form[0])
        if name in out:
            return None
        out[name] = i
    return out


def is_keyed(body: tuple[Form, ...]) -> bool:
    """True if *body* is a set of fields keyed by their head atoms."""
    return field_index(body) is not None


def same_form(a: Form, b: Form) -> bool:
    """Whether two forms are the same, telling an atom from a string of the same text."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(same_form(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def not_keyed(frame_id: str) -> FieldError:
    """The ``not_keyed`` error of an edit of *frame_id*, whose body has no fields."""
    return FieldError(
        "not_keyed",
        f"the body of {frame_id} is not a set of fields (each top-level form a list headed"
        " by its own atom, such as (status open)): change it with revise",
    )


def edit_work(
    body: tuple[Form, ...], index: dict[str, int], name: str, values: tuple[Form, ...]
) -> int:
    """The forms an edit of field *name* of *body* (whose :func:`field_index` is *index*)
    copies or compares: the body's top-level forms, the field's values and the new ones."""
    at = index.get(name)
    return len(body) + (0 if at is None else len(body[at])) + len(values)


def apply_edit(
    body: tuple[Form, ...], op: str, frame_id: str, name: str, values: tuple[Form, ...]
) -> tuple[Form, ...]:
    """The body after edit *op* of field *name* with *values*: :func:`apply_indexed`
    with the body's own index."""
    index = field_index(body)
    if index is None:
        raise not_keyed(frame_id)
    return apply_indexed(body, index, op, frame_id, name, values)[0]


def apply_indexed(
    body: tuple[Form, ...],
    index: dict[str, int],
    op: str,
    frame_id: str,
    name: str,
    values: tuple[Form, ...],
) -> tuple[tuple[Form, ...], dict[str, int]]:
    """The body after edit *op* of field *name* with *values* (see the module docstring),
    and its field index; *index* is :func:`field_index` of *body* (left unchanged).

    * ``set``: the field becomes ``(name values…)``, added at the end if missing;
    * ``append``: *values* go after the field's values, the field is added if missing;
    * ``remove``: every value equal to one of *values* leaves the field (a missing
      field or value is not an error);
    * ``incr``: the field's one integer value grows by ``values[0]`` (a missing
      field starts at 0); a field that does not hold exactly one integer is refused
      ``not_a_number``, a result outside the signed 64-bit range ``counter_overflow``;
    * ``unset``: the field is removed (a missing one is not an error).

    Raises :class:`FieldError` (``not_keyed`` when *body* has no fields).
    """
    at = index.get(name)
    head = Symbol(name)
    if op == "set":
        new: Form | None = (head, *values)
    elif op == "append":
        new = (head, *values) if at is None else body[at] + values
    elif op == "remove":
        if at is None:
            return body, index
        drop = {form_key(x) for x in values}
        kept = tuple(v for v in body[at][1:] if form_key(v) not in drop)
        new = (head, *kept)
    elif op == "incr":
        delta = values[0]
        if at is None:
            current = 0
        else:
            held = body[at][1:]
            if len(held) != 1 or type(held[0]) is not int:
                raise FieldError(
                    "not_a_number",
                    f"incr: field {name} of {frame_id} does not hold one integer:"
                    f" it holds {len(held)} value(s)",
                )
            current = held[0]
        total = current + delta
        if not INCR_MIN <= total <= INCR_MAX:
            raise FieldError(
                "counter_overflow",
                f"incr: {name} of {frame_id} would leave the 64-bit range ({total})"[:200],
            )
        new = (head, total)
    elif op == "unset":
        new = None
    else:  # pragma: no cover - the set of field operations is closed
        raise FieldError("unknown_op", f"unknown field edit {op!r}")
    if at is None:
        if new is None:
            return body, index
        return (*body, new), {**index, name: len(body)}
    if new is None:
        shifted = {k: (i if i < at else i - 1) for k, i in index.items() if k != name}
        return body[:at] + body[at + 1 :], shifted
    return (*body[:at], new, *body[at + 1 :]), index


def changed_fields(old: tuple[Form, ...] | None, new: tuple[Form, ...]) -> set[str] | None:
    """The names of the fields that differ between *old* (None: no frame) and *new*.

    None when either body is not keyed: the body was rewritten as a whole.
    """
    after = field_index(new)
    if old is None:  # a new frame: every field it has changed
        return None if after is None else set(after)
    before = field_index(old)
    if after is None or before is None:
        return None
    out: set[str] = set()
    for name, i in after.items():
        j = before.get(name)
        if j is None or old is None or not same_form(old[j], new[i]):
            out.add(name)
    out.update(name for name in before if name not in after)
    return out


def edits_between(
    old: tuple[Form, ...], new: tuple[Form, ...]
) -> list[tuple[str, str, tuple[Form, ...]]] | None:
    """Field edits ``(op, field, values)`` that turn the keyed body *old* into *new*.

    What a read-modify-write meant, written so that concurrent writers collide only
    where their meanings do: a field whose values grew at the end is an ``append`` of
    the new values; one that lost values (the rest kept in order, none of the lost
    ones left) is a ``remove``; a field gone is an ``unset``; any other change is a
    ``set``. None when a whole-body ``revise`` is needed: either body is not keyed,
    the fields kept changed their order, or a new field is not after every kept one
    (edits add fields at the end). An empty list: nothing changed.
    """
    before, after = field_index(old), field_index(new)
    if before is None or after is None:
        return None
    kept = [name for name in after if name in before]
    if kept != [name for name in before if name in after]:
        return None
    added = [name for name in after if name not in before]
    if added and kept and after[added[0]] < after[kept[-1]]:
        return None
    out: list[tuple[str, str, tuple[Form, ...]]] = []
    for name in before:
        if name not in after:
            out.append(("unset", name, ()))
    for name, i in after.items():
        j = before.get(name)
        values = new[i][1:]
        if j is None:
            out.append(("set", name, values))
            continue
        was = old[j][1:]
        if same_form(was, values):
            continue
        if len(values) > len(was) and same_form(values[: len(was)], was):
            out.append(("append", name, values[len(was) :]))
        elif len(values) < len(was) and _removal(was, values) is not None:
            out.append(("remove", name, _removal(was, values) or ()))
        else:
            out.append(("set", name, values))
    return out


def _removal(was: tuple[Form, ...], now: tuple[Form, ...]) -> tuple[Form, ...] | None:
    """The distinct values removing which from *was* leaves exactly *now*; None if none do."""
    staying = {form_key(x) for x in now}
    gone: dict[Any, Form] = {}
    for v in was:
        k = form_key(v)
        if k not in staying and k not in gone:
            gone[k] = v
    if not gone:
        return None
    left = tuple(v for v in was if form_key(v) not in gone)
    return tuple(gone.values()) if same_form(left, now) else None


def form_key(form: Form) -> Any:
    """A hashable key of *form* that tells an atom from a string of the same text."""
    cls = type(form)
    if cls is tuple:
        return (3, tuple(form_key(x) for x in form))
    if cls is Symbol:
        return (1, str(form))
    if cls is str:
        return (2, form)
    return (0, form)
