"""One function per operation of the transaction language (R7, R11–R15, R18, R19, R41, R42).

Each function applies one operation to a :class:`~protocol.engine.overlay.Decision`
or raises :class:`~protocol.engine.overlay.OpFailure` with a stable code; the
evaluation looks the function up by the operation's exact class in
:data:`HANDLERS` and falls back to :func:`apply_operation` (an ``isinstance``
dispatch) for a subclass. Operations write only to the decision's overlay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from protocol.engine.overlay import Decision, OpFailure, Overlay
from protocol.fields import (
    MAX_EDIT_WORK,
    FieldError,
    apply_indexed,
    changed_fields,
    edit_work,
    field_index,
    not_keyed,
)
from protocol.ids import SUPERSEDES
from protocol.state import (
    ACCEPTED,
    ACTIVE,
    CANDIDATE,
    RETIRED,
    RETIRING,
    Event,
    Frame,
    default_envelope,
)
from protocol.tx import (
    FIELD_EDIT_CLASSES,
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


def _resolve_sources(ov: Overlay, refs: tuple[str, ...], self_id: str) -> dict[str, Event | Frame]:
    """The sources named by *refs*, by stable id in first-mention order, with their records.

    The records are what the governance check reads (:func:`_unreviewed_session`),
    so an event source costs no second lookup by its stable id.
    """
    out: dict[str, Event | Frame] = {}
    for ref in refs:
        record: Event | Frame | None
        seq = _event_seq(ref)
        if seq is not None:
            record = ov.event(seq)
            if record is None:
                raise OpFailure("unknown_ref", f"no event {ref}")
            stable = record.id
        else:
            if ref == self_id:
                raise OpFailure("self_source", f"{ref} cannot list itself as a source")
            record = ov.frame(ref)
            if record is None:
                raise OpFailure("unknown_ref", f"no frame {ref}")
            stable = ref
        if stable not in out:
            out[stable] = record
    return out


UNREVIEWED_EVENT_KINDS = frozenset({"recall_result"})
"""Observation kinds whose content is unreviewed: a frame derived from one is a candidate."""
MODEL_SETTABLE_TRUST = frozenset({CANDIDATE})
"""The only trust status a model transaction may set (R42): the rest is the runtime's."""


def _unreviewed_session(sources: Iterable[Event | Frame]) -> tuple[bool, str | None]:
    """Whether any source is unreviewed (R42), and the session it came from.

    *sources* are the source records as :func:`_resolve_sources` found them.
    Unreviewed: a frame that is not ``accepted`` (a candidate, or quarantined or
    rejected), a ``recall_result`` observation, or one recorded with
    ``extra["risky"]`` set. The session is that of the first event source, or
    else of the first unreviewed frame source.
    """
    unreviewed = False
    event_session: str | None = None
    frame_session: str | None = None
    for src in sources:
        if isinstance(src, Event):
            if event_session is None:
                event_session = src.session
            if src.kind in UNREVIEWED_EVENT_KINDS or src.extra.get("risky"):
                unreviewed = True
        elif src.trust != ACCEPTED:
            unreviewed = True
            if frame_session is None:
                frame_session = src.envelope.get("session")
    return unreviewed, event_session or frame_session


def _set_envelope(f: Frame, op: Envelope) -> None:
    current = f.trust
    if op.reviewed_by is not None:
        raise OpFailure("not_permitted", "reviewed-by is set by the runtime, not by a model")
    if op.trust is not None and op.trust != current:
        if op.trust not in MODEL_SETTABLE_TRUST or current != ACCEPTED:
            raise OpFailure(
                "not_permitted",
                f"trust {op.trust} of {f.id} (now {current}) is decided by admission or a "
                "reviewer; a model may only mark an accepted frame as a candidate",
            )
    env = dict(f.envelope)
    for key in ("kind", "tenant", "project", "valid_from", "valid_to", "risk", "trust"):
        value = getattr(op, key)
        if value is not None:
            env[key] = value
    if op.keys is not None:
        env["keys"] = list(op.keys)
    lo, hi = env.get("valid_from"), env.get("valid_to")
    if lo is not None and hi is not None and hi < lo:
        raise OpFailure("bad_validity", f"valid-to of {f.id} would be before its valid-from")
    f.envelope = env


def _cancel(f: Frame) -> None:
    f.lifecycle = ACTIVE
    f.due_tick = None
    f.marked_tick = None
    f.retire_reason = None


def _event_seq(ref: str) -> int | None:
    """The sequence number of the event reference *ref* (``@e42`` → 42); None for a frame id.

    :func:`~protocol.ids.ref_seq`'s rule (``@e`` then 1 to 18 ASCII digits, no leading
    zero) without its regular expression: every operation naming a ref runs this.
    """
    if ref[:2] != "@e":
        return None
    digits = ref[2:]
    if 0 < len(digits) <= 18 and digits.isascii() and digits.isdigit() and digits[0] != "0":
        return int(digits)
    return None


# One function per operation: evaluate() looks the function up by the operation's
# exact class (HANDLERS); apply_operation is the isinstance dispatch for anything else.


def _derive(d: Decision, op: Derive, index: int) -> None:
    ov = d.ov
    if ov.frame(op.id) is not None:
        raise OpFailure("frame_exists", f"frame {op.id} already exists")
    resolved = _resolve_sources(ov, op.sources, op.id)
    sources = tuple(resolved)
    version, meta = d.version, d.meta
    # The runtime fills what it owns (R41): scope from the context, the tick,
    # the session the content came from, and candidacy for unreviewed sources (R42).
    unreviewed, session = _unreviewed_session(resolved.values())
    env = default_envelope()
    env["tenant"], env["project"] = meta.tenant, meta.project
    env["created_tick"] = meta.tick
    env["session"] = session
    if unreviewed:
        env["trust"] = CANDIDATE
    # Positional: id, revision, body, sources, lifecycle, protected, created and
    # updated version, retire_gen, due_tick, marked_tick, retire_reason,
    # retired_version, envelope.
    f = Frame(
        op.id, 1, op.body, sources, ACTIVE, False, version, version, 0, None, None, None, None, env
    )
    ov.put_new_frame(f)
    d.note_fields(op.id, changed_fields(None, op.body))
    sourced = d.sourced
    for src in sources:
        if not src.startswith("ev:"):
            sourced.add(src)
    d.writes.append({"frame": op.id, "op": "derive", "revision": 1, "index": index})


def _revise(d: Decision, op: Revise, index: int) -> None:
    ov = d.ov
    current = ov.frame(op.id)
    if current is None:
        raise OpFailure("unknown_ref", f"no frame {op.id}")
    if current.lifecycle == RETIRED:
        raise OpFailure("retired_frame", f"frame {op.id} is retired; restore it first")
    added = _resolve_sources(ov, op.sources, op.id)
    d.note_fields(op.id, changed_fields(current.body, op.body))
    f = ov.writable_frame(op.id)
    f.revision += 1
    f.body = op.body
    _add_sources(d, f, added)
    d.writes.append({"frame": op.id, "op": "revise", "revision": f.revision, "index": index})


def _add_sources(d: Decision, f: Frame, added: dict[str, Event | Frame]) -> None:
    """A new revision of *f* citing *added*: sources grow, trust and window follow (R15, R42)."""
    new = [s for s in added if s not in f.sources]
    if new:
        f.sources = f.sources + tuple(new)
    unreviewed, session = _unreviewed_session(added[s] for s in new)
    if unreviewed and f.trust == ACCEPTED:
        f.envelope["trust"] = CANDIDATE
        if f.envelope.get("session") is None:
            f.envelope["session"] = session
    if f.lifecycle == RETIRING:
        _cancel(f)
    sourced = d.sourced
    for src in f.sources:
        if not src.startswith("ev:"):
            sourced.add(src)


def _field_edit(d: Decision, op: Any, index: int) -> None:
    """``set``, ``append``, ``remove``, ``incr`` or ``unset`` of one field (protocol.fields).

    Applied to the frame as it stands now: the conflict rule (which edits are refused
    when their field changed after the base) was applied before any operation ran.
    """
    ov = d.ov
    current = ov.frame(op.id)
    if current is None:
        raise OpFailure("unknown_ref", f"no frame {op.id}")
    if current.lifecycle == RETIRED:
        raise OpFailure("retired_frame", f"frame {op.id} is retired; restore it first")
    cached = d.field_indexes.get(op.id)
    if cached is not None and cached[0] is current.body:
        fields: dict[str, int] | None = cached[1]
    else:
        fields = field_index(current.body)
    try:
        if fields is None:
            raise not_keyed(op.id)
        d.edit_work += edit_work(current.body, fields, op.field, op.values)
        if d.edit_work > MAX_EDIT_WORK:
            raise FieldError(
                "work_limit",
                f"{op.op}: the field edits of this transaction copy more than {MAX_EDIT_WORK}"
                f" forms ({op.id} holds {len(current.body)} fields): edit fewer times in one"
                " transaction, or put the values of several edits of a field in one",
            )
        body, fields = apply_indexed(current.body, fields, op.op, op.id, op.field, op.values)
    except FieldError as e:
        raise OpFailure(e.code, e.message) from None
    d.field_indexes[op.id] = (body, fields)
    added = _resolve_sources(ov, op.sources, op.id)
    f = ov.writable_frame(op.id)
    f.revision += 1
    f.body = body
    _add_sources(d, f, added)
    d.note_fields(op.id, {op.field})
    base = d.tx.base_version
    if base == d.meta.version:
        outcome = "applied"
    elif ov.view.lastmod("f:" + op.id) > base:
        outcome = "merged"
    else:
        outcome = "rebased"
    d.edits.append((index, op.id, op.field, f.revision, outcome))
    # No "index": the operation holds one field, not the body the history shows.
    d.writes.append({"frame": op.id, "op": op.op, "revision": f.revision, "field": op.field})


def _relate(d: Decision, op: Relate, index: int) -> None:  # Unrelate too
    ov = d.ov
    t = (op.subject, op.label, op.object)
    for end in (t[0], t[2]):
        if ov.frame(end) is None:
            raise OpFailure("unknown_ref", f"no frame {end}")
    if isinstance(op, Unrelate):
        if not ov.has_relation(*t):
            raise OpFailure("unknown_relation", f"no relation {op.subject} {op.label} {op.object}")
        # rel_add and rel_del hold the transaction's net effect on the stored relations:
        # unrelating an edge this transaction added only takes the addition back.
        if t in ov.rel_add:
            ov.rel_add.discard(t)
        else:
            ov.rel_del.add(t)
        d.edges_changed.add(t)
    else:
        if not ov.has_relation(*t):  # relating an existing edge changes nothing
            if t in ov.rel_del:  # it was stored before this transaction unrelated it
                ov.rel_del.discard(t)
            else:
                ov.rel_add.add(t)
            d.edges_changed.add(t)
        if t[1] == SUPERSEDES:
            d.supersede_objects.add(t[2])


def _retire(d: Decision, op: Retire, index: int) -> None:
    ov = d.ov
    for ref in op.refs:
        seq = _event_seq(ref)
        if seq is not None:
            e = ov.event(seq)
            if e is None:
                raise OpFailure("unknown_ref", f"no event {ref}")
            if e.causally_protected:
                raise OpFailure(
                    "causally_protected",
                    f"{ref} is a user request not yet delivered; deliver it first",
                )
            if e.lifecycle != RETIRED:
                w = ov.writable_event(e.seq)
                w.lifecycle = RETIRED
                w.retired_version = d.version
            continue
        f0 = ov.frame(ref)
        if f0 is None:
            raise OpFailure("unknown_ref", f"no frame {ref}")
        if f0.protected:
            raise OpFailure("protected", f"frame {ref} is protected; unprotect it first")
        d.marked.add(ref)
        if f0.lifecycle == ACTIVE:
            meta = d.meta
            f = ov.writable_frame(ref)
            f.lifecycle = RETIRING
            f.retire_gen += 1
            f.marked_tick = meta.tick
            f.due_tick = meta.tick + meta.window
            f.retire_reason = d.tx.reason


def _restore(d: Decision, op: Restore, index: int) -> None:
    ov = d.ov
    seq = _event_seq(op.ref)
    if seq is not None:
        e = ov.event(seq)
        if e is None:
            raise OpFailure("unknown_ref", f"no event {op.ref}")
        if e.lifecycle == RETIRED:
            w = ov.writable_event(e.seq)
            w.lifecycle = ACTIVE
            w.retired_version = None
        return
    f0 = ov.frame(op.ref)
    if f0 is None:
        raise OpFailure("unknown_ref", f"no frame {op.ref}")
    if f0.lifecycle != ACTIVE:
        f = ov.writable_frame(op.ref)
        _cancel(f)
        f.retired_version = None
        d.restored_subjects.add(op.ref)


def _protect(d: Decision, op: Protect, index: int) -> None:
    ov = d.ov
    f0 = ov.frame(op.id)
    if f0 is None:
        raise OpFailure("unknown_ref", f"no frame {op.id}")
    if f0.lifecycle == RETIRED:
        raise OpFailure("retired_frame", f"frame {op.id} is retired; restore it first")
    if not f0.protected or f0.lifecycle == RETIRING:
        f = ov.writable_frame(op.id)
        _cancel(f)
        f.protected = True


def _unprotect(d: Decision, op: Unprotect, index: int) -> None:
    ov = d.ov
    f0 = ov.frame(op.id)
    if f0 is None:
        raise OpFailure("unknown_ref", f"no frame {op.id}")
    if f0.protected:
        ov.writable_frame(op.id).protected = False


def _envelope(d: Decision, op: Envelope, index: int) -> None:
    ov = d.ov
    if ov.frame(op.id) is None:
        raise OpFailure("unknown_ref", f"no frame {op.id}")
    f = ov.writable_frame(op.id)
    _set_envelope(f, op)
    # No "index": the history shows no body for an envelope change.
    d.writes.append({"frame": op.id, "op": "envelope", "revision": f.revision})


HANDLERS: dict[type, Callable[[Decision, Any, int], None]] = {
    Derive: _derive,
    Revise: _revise,
    Relate: _relate,
    Unrelate: _relate,
    Retire: _retire,
    Restore: _restore,
    Protect: _protect,
    Unprotect: _unprotect,
    Envelope: _envelope,
    **dict.fromkeys(FIELD_EDIT_CLASSES.values(), _field_edit),
}


def apply_operation(d: Decision, op: Any, index: int) -> None:
    """Apply *op*, an instance of a subclass of an operation class, to the decision."""
    if isinstance(op, Derive):
        _derive(d, op, index)
    elif isinstance(op, Revise):
        _revise(d, op, index)
    elif isinstance(op, Relate):
        _relate(d, op, index)
    elif isinstance(op, Retire):
        _retire(d, op, index)
    elif isinstance(op, Restore):
        _restore(d, op, index)
    elif isinstance(op, Protect):
        _protect(d, op, index)
    elif isinstance(op, Unprotect):
        _unprotect(d, op, index)
    elif isinstance(op, Envelope):
        _envelope(d, op, index)
    elif isinstance(op, tuple(FIELD_EDIT_CLASSES.values())):
        _field_edit(d, op, index)
    else:  # pragma: no cover - the op union is closed
        raise OpFailure("unknown_op", f"unknown operation {op!r}")
