"""Forms a frame body may not hold: clauses written in the wrong place (docs/language.md,
"Reserved forms").

:func:`misplaced_form` finds the first such form of a body; the operation models of
:mod:`protocol.tx` refuse a body holding one, so the text, JSON and msgpack forms all
refuse the same bodies.
"""

from __future__ import annotations

from typing import Any

from protocol.fields import FIELD_OPS
from protocol.forms import Symbol
from protocol.ids import is_event_ref, is_ref

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
written there is one whose parenthesis closed too late. Deeper in a body they are content.
The field edits (:data:`FIELD_OP_NAMES`) are not among them: ``set``, ``append`` and the
others are ordinary field names (a body written before they existed stays valid)."""

FIELD_OP_NAMES = FIELD_OPS
"""The operations that edit one field of a keyed body (:mod:`protocol.fields`)."""

ALL_OP_NAMES = OP_NAMES + FIELD_OP_NAMES
"""Every operation name of the language."""


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


_DROP_FROM = str.maketrans("", "", FROM)


def _near_from(form: Any) -> bool:
    """``(form @e1)``, ``(From @e1)``: a list of references headed by a misspelt ``from``."""
    if not (isinstance(form, tuple) and len(form) > 1) or type(form[0]) is str:
        return False
    head = form[0]
    if not isinstance(head, str) or head == FROM or not 2 <= len(head) <= 6:
        return False
    low = head.lower()
    # One edit from "from" leaves at most one character outside f, r, o, m: one C call
    # decides most heads ("tests", "run") before the edit comparison.
    if len(low.translate(_DROP_FROM)) > 1 or not _one_edit(low, FROM):
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
