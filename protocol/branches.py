"""Branches of memory: the three-way diff of two contexts and a merge's plan (docs/branches.md).

Two contexts that share a history (one forked from the other, or merged since)
are compared against their **merge base**: the frames, lifecycles and
relations as they stood at the last point both held. Each frame is read on
three sides — *base*, *ours* (the target, which receives the merge) and
*theirs* (the source) — and sorted by :func:`classify`:

* ``added``, ``changed``, ``retired``: only theirs changed since the base (the
  merge applies it);
* ``behind``: only ours changed (nothing to apply; ``change`` says what ours did);
* ``conflict``: both changed, differently, the same part of the frame;
* both changed compatibly (different fields of a keyed body, a body on one
  side and the lifecycle on the other): ``changed`` with ``both`` set, and the
  merged frame holds both changes.

A frame is compared part by part: its existence, whether it is live (active),
whether it is protected, and its body — field by field when base, ours and
theirs are all keyed (:mod:`protocol.fields`), else as one whole. A part
changed on one side only takes that side's value; a part both sides changed to
the same value is no conflict.

Observations are immutable: those theirs holds and ours does not are added,
never in conflict. Relations are a set: theirs' additions and removals since
the base apply unless ours made the same (a union, never a conflict).

:func:`plan_ops` turns the frames a merge applies into the operations of
context transactions on the target (``derive``, ``revise``, field edits,
``retire``, ``restore``, ``protect``, ``relate`` …): the engine decides them as
it decides any transaction, so every rule of the language holds for a merged
change too. Everything here is a function of its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from protocol.errors import RequestError
from protocol.fields import edits_between, field_index, same_form
from protocol.forms import Form, Symbol
from protocol.replies import Reply
from protocol.sexpr import print_form
from protocol.state import ACTIVE, Frame, Meta
from protocol.tx import (
    FIELD_EDIT_CLASSES,
    MAX_OPS,
    MAX_REFS,
    ContextTx,
    Derive,
    Protect,
    Relate,
    Restore,
    Retire,
    Revise,
    Unprotect,
    Unrelate,
)

Status = Literal["added", "changed", "retired", "conflict", "behind"]
"""How a frame differs between the target and the source (see the module docstring)."""
STATUSES: tuple[Status, ...] = ("added", "changed", "retired", "conflict", "behind")
Strategy = Literal["fail", "ours", "theirs"]
"""What a merge does with a conflict left unresolved: refuse everything (``fail``),
keep the target's part (``ours``) or take the source's (``theirs``)."""
STRATEGIES: tuple[Strategy, ...] = ("fail", "ours", "theirs")
Resolution = Literal["ours", "theirs"]
"""A conflict's resolution, per frame."""

Edge = tuple[str, str, str]
"""A relation ``(subject, label, object)``."""

BODY = "(body)"
"""The name a whole (unkeyed) body takes among a conflict's parts."""
EXISTS = "(exists)"
"""The part that says whether a frame exists at all."""


@dataclass(frozen=True, slots=True)
class Parts:
    """A frame cut into the parts a three-way merge compares: its fields (or its whole
    body under :data:`BODY`), whether it is live and whether it is protected."""

    fields: dict[str, tuple[Form, ...]]
    keyed: bool
    live: bool
    protected: bool
    sources: tuple[str, ...]
    order: tuple[str, ...]

    @classmethod
    def of(cls, f: Frame) -> Parts:
        index = field_index(f.body)
        if index is not None:
            fields = {name: f.body[i][1:] for name, i in index.items()}
            order = tuple(index)
        else:
            fields, order = {BODY: f.body}, (BODY,)
        return cls(fields, index is not None, f.lifecycle == ACTIVE, f.protected, f.sources, order)

    def body(self) -> tuple[Form, ...]:
        """The body these parts make."""
        if not self.keyed:
            return self.fields.get(BODY, ())
        return tuple((Symbol(name), *self.fields[name]) for name in self.order)


def _same(a: tuple[Form, ...] | None, b: tuple[Form, ...] | None) -> bool:
    if a is None or b is None:
        return a is b
    return same_form(a, b)


def same_frame(a: Frame | None, b: Frame | None) -> bool:
    """Whether two frames agree on every part a merge compares (body, live, protected)."""
    if a is None or b is None:
        return a is b
    return (
        (a.lifecycle == ACTIVE) == (b.lifecycle == ACTIVE)
        and a.protected == b.protected
        and same_form(a.body, b.body)
    )


def change_of(before: Frame | None, after: Frame | None) -> str:
    """What one side did to a frame: ``added``, ``retired``, ``removed`` or ``changed``."""
    if before is None:
        return "added"
    if after is None:
        return "removed"
    if before.lifecycle == ACTIVE and after.lifecycle != ACTIVE:
        return "retired"
    return "changed"


@dataclass(frozen=True, slots=True)
class PartDiff:
    """One part both sides changed: its *part* name and its three values (None: absent)."""

    part: str
    base: Any
    ours: Any
    theirs: Any

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.part, "base": self.base, "ours": self.ours, "theirs": self.theirs}


@dataclass(frozen=True, slots=True)
class FrameDiff:
    """One frame that differs: its *status* (:data:`Status`), the frames on the three sides,
    and for a conflict the parts in conflict. *change* is what ours did (``behind``)
    or theirs did (otherwise); *both*: both sides changed, compatibly."""

    id: str
    status: Status
    change: str
    base: Frame | None
    ours: Frame | None
    theirs: Frame | None
    both: bool = False
    conflicts: tuple[PartDiff, ...] = ()

    def resolved(self, resolution: Resolution) -> Frame | None:
        """The frame a merge writes taking *resolution*'s side of each conflicting part;
        None when the result is that ours stays as it is."""
        return merge_frames(self.base, self.ours, self.theirs, resolution)

    def as_dict(self) -> dict[str, Any]:
        """The plain form a reply carries: bodies printed, conflicts part by part."""
        out: dict[str, Any] = {"id": self.id, "status": self.status, "change": self.change}
        for side, f in (("base", self.base), ("ours", self.ours), ("theirs", self.theirs)):
            out[side] = None if f is None else _summary(f)
        if self.both:
            out["both"] = True
        if self.conflicts:
            out["fields"] = [c.as_dict() for c in self.conflicts]
        return out


def _summary(f: Frame) -> dict[str, Any]:
    return {
        "body": " ".join(print_form(x) for x in f.body),
        "lifecycle": f.lifecycle,
        "protected": f.protected,
        "revision": f.revision,
    }


def _printed(values: tuple[Form, ...] | None) -> str | None:
    return None if values is None else " ".join(print_form(x) for x in values)


def _parts_conflicts(base: Parts | None, ours: Parts, theirs: Parts) -> list[PartDiff]:
    """The parts ours and theirs both changed from *base* to different values."""
    out: list[PartDiff] = []
    keyed = ours.keyed and theirs.keyed and (base is None or base.keyed)
    if keyed or (not ours.keyed and not theirs.keyed and (base is None or not base.keyed)):
        b_fields = {} if base is None else base.fields
        names = list(ours.fields) + [n for n in theirs.fields if n not in ours.fields]
        names += [n for n in b_fields if n not in ours.fields and n not in theirs.fields]
        for name in names:
            b, o, t = b_fields.get(name), ours.fields.get(name), theirs.fields.get(name)
            if _same(o, t) or _same(b, t) or _same(b, o):
                continue
            out.append(PartDiff(name, _printed(b), _printed(o), _printed(t)))
    else:  # the body changed shape on some side: it is one part
        b_body, o_body, t_body = (None if base is None else base.body()), ours.body(), theirs.body()
        if not (_same(o_body, t_body) or _same(b_body, t_body) or _same(b_body, o_body)):
            out.append(PartDiff(BODY, _printed(b_body), _printed(o_body), _printed(t_body)))
    # Being live and being protected are yes-or-no parts: when ours and theirs differ,
    # one of them still holds the base's value, so they never conflict.
    return out


def classify(
    frame_id: str, base: Frame | None, ours: Frame | None, theirs: Frame | None
) -> FrameDiff | None:
    """How *frame_id* differs between ours and theirs given their merge base; None if it
    does not (both sides agree, whatever the base held)."""
    if same_frame(ours, theirs):
        return None
    if same_frame(base, theirs):
        return FrameDiff(frame_id, "behind", change_of(base, ours), base, ours, theirs)
    if same_frame(base, ours):
        status = change_of(base, theirs)
        if status == "removed":  # theirs forgot it: a merge never erases (docs/forget.md)
            return FrameDiff(frame_id, "behind", "removed", base, ours, theirs)
        return FrameDiff(frame_id, status, status, base, ours, theirs)  # type: ignore[arg-type]
    if ours is None or theirs is None:
        gone = PartDiff(EXISTS, base is not None, ours is not None, theirs is not None)
        return FrameDiff(frame_id, "conflict", "changed", base, ours, theirs, True, (gone,))
    b = None if base is None else Parts.of(base)
    conflicts = _parts_conflicts(b, Parts.of(ours), Parts.of(theirs))
    if conflicts:
        change = change_of(base, theirs)
        return FrameDiff(frame_id, "conflict", change, base, ours, theirs, True, tuple(conflicts))
    return FrameDiff(frame_id, "changed", change_of(base, theirs), base, ours, theirs, True)


def _pick(b: Any, o: Any, t: Any, resolution: Resolution) -> Any:
    if _eq(o, t) or _eq(b, t):
        return o
    if _eq(b, o):
        return t
    return o if resolution == "ours" else t


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return _same(a, b)
    return bool(a == b)


def merge_frames(
    base: Frame | None, ours: Frame | None, theirs: Frame | None, resolution: Resolution
) -> Frame | None:
    """The frame a merge leaves: each part from the side that alone changed it, a part
    both changed from *resolution*'s side. None: ours is kept unchanged (or stays absent)."""
    if theirs is None or same_frame(ours, theirs) or same_frame(base, theirs):
        return None
    if ours is None:
        return theirs if (base is None or resolution == "theirs") else None
    if same_frame(base, ours):
        return theirs
    b = None if base is None else Parts.of(base)
    o, t = Parts.of(ours), Parts.of(theirs)
    keyed = o.keyed and t.keyed and (b is None or b.keyed)
    if keyed:
        b_fields = {} if b is None else b.fields
        fields: dict[str, tuple[Form, ...]] = {}
        order = [n for n in o.order] + [n for n in t.order if n not in o.fields]
        for name in order:
            value = _pick(b_fields.get(name), o.fields.get(name), t.fields.get(name), resolution)
            if value is not None:
                fields[name] = value
        body = tuple((Symbol(n), *fields[n]) for n in order if n in fields)
    else:
        b_body = None if b is None else b.body()
        body = _pick(b_body, ours.body, theirs.body, resolution)
    merged = ours.copy()
    merged.body = body
    b_live = True if b is None else b.live
    live = _pick(b_live, o.live, t.live, resolution)
    merged.lifecycle = ACTIVE if live else (ours.lifecycle if not o.live else theirs.lifecycle)
    b_prot = False if b is None else b.protected
    merged.protected = _pick(b_prot, o.protected, t.protected, resolution)
    merged.sources = ours.sources + tuple(s for s in theirs.sources if s not in ours.sources)
    return None if same_frame(merged, ours) else merged


def relation_changes(
    base: set[Edge], ours: set[Edge], theirs: set[Edge]
) -> tuple[list[Edge], list[Edge], list[Edge], list[Edge]]:
    """``(added, removed, ours_added, ours_removed)``: the edges theirs added and removed
    since the base that ours does not already agree with, and ours' own changes."""
    added = sorted((theirs - base) - ours)
    removed = sorted((base - theirs) & ours)
    return added, removed, sorted((ours - base) - theirs), sorted((base - ours) & theirs)


# -- the plan: operations on the target ---------------------------------------------------


@dataclass(slots=True)
class Plan:
    """What a merge writes: the operations (in order) and what each frame became."""

    ops: list[Any] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    dropped_sources: list[tuple[str, str]] = field(default_factory=list)
    relations_added: list[Edge] = field(default_factory=list)
    relations_removed: list[Edge] = field(default_factory=list)

    def transactions(self, base_version: int, reason: str) -> list[ContextTx]:
        """The ops cut into context transactions of at most :data:`~protocol.tx.MAX_OPS`
        operations each, the first based on *base_version* and each next one on the
        version its predecessor commits (decided one after another in one write)."""
        out = []
        for n, start in enumerate(range(0, len(self.ops), MAX_OPS)):
            chunk = tuple(self.ops[start : start + MAX_OPS])
            out.append(ContextTx(base_version=base_version + n, reason=reason, ops=chunk))
        return out


def _sources(
    f: Frame, exists: Callable[[str], bool], event_refs: Mapping[str, str], plan: Plan
) -> tuple[str, ...]:
    out: list[str] = []
    for s in f.sources:
        ref = event_refs.get(s) if s.startswith("ev:") else (s if exists(s) else None)
        if ref is None:
            plan.dropped_sources.append((f.id, s))
        elif ref not in out and len(out) < MAX_REFS:
            out.append(ref)
    return tuple(out)


def plan_ops(
    merged: Iterable[tuple[Frame | None, Frame]],
    *,
    exists: Callable[[str], bool],
    event_refs: Mapping[str, str],
    relations_added: Iterable[Edge] = (),
    relations_removed: Iterable[Edge] = (),
) -> Plan:
    """The operations that turn each *ours* frame into its *merged* one (pairs
    ``(ours, merged)``, ours None for a frame the target lacks), then the relation
    changes whose ends exist afterwards.

    *exists*: whether the target holds a frame id; *event_refs*: the target's reference
    (``@eN``) of each event id a merged frame may cite. A source the target cannot
    resolve is left out and listed in ``dropped_sources``. New frames are derived in
    the order given (the caller orders them by creation, so a frame's sources come first).
    """
    plan = Plan()
    pairs = list(merged)
    created = {new.id for ours, new in pairs if ours is None}  # derived first: cited later
    known: dict[str, bool] = {}

    def have(frame_id: str) -> bool:
        if frame_id in created:
            return True
        if frame_id not in known:
            known[frame_id] = exists(frame_id)
        return known[frame_id]

    for ours, new in sorted(pairs, key=lambda p: p[0] is not None):
        plan.frames.append(new.id)
        sources = _sources(new, have, event_refs, plan)
        if ours is None:
            plan.ops.append(Derive(id=new.id, sources=sources, body=new.body))
            if new.lifecycle != ACTIVE:
                plan.ops.append(Retire(refs=(new.id,)))
            if new.protected:
                plan.ops.append(Protect(id=new.id))
            continue
        added = tuple(s for s in sources if s not in ours.sources)
        if ours.lifecycle != ACTIVE and new.lifecycle == ACTIVE:
            plan.ops.append(Restore(ref=new.id))
        if ours.protected and not new.protected:
            plan.ops.append(Unprotect(id=new.id))
        if not same_form(ours.body, new.body):
            plan.ops.extend(_body_ops(ours, new, added))
        if ours.lifecycle == ACTIVE and new.lifecycle != ACTIVE:
            plan.ops.append(Retire(refs=(new.id,)))
        if new.protected and not ours.protected:
            plan.ops.append(Protect(id=new.id))
    for s, label, o in relations_added:
        if have(s) and have(o):
            plan.ops.append(Relate(subject=s, label=label, object=o))
            plan.relations_added.append((s, label, o))
    for s, label, o in relations_removed:
        plan.ops.append(Unrelate(subject=s, label=label, object=o))
        plan.relations_removed.append((s, label, o))
    return plan


def _body_ops(ours: Frame, new: Frame, sources: tuple[str, ...]) -> list[Any]:
    """Field edits from ours' body to the new one when both are keyed, else one revise."""
    edits = edits_between(ours.body, new.body) if new.body else None
    if not edits:
        return [Revise(id=new.id, sources=sources, body=new.body)]
    out: list[Any] = []
    for i, (op, name, values) in enumerate(edits):
        cls = FIELD_EDIT_CLASSES[op]
        out.append(
            cls.model_validate(
                {
                    "id": new.id,
                    "sources": sources if i == 0 else (),
                    "field": name,
                    "values": values,
                }
            )
        )
    return out


# -- the merge base and the reply ---------------------------------------------------------


class BranchReply(Reply):
    """What a diff, merge, pick or revert found and did.

    ``frames``: each frame that differs (``id``, ``status``, ``change``, the
    ``base``/``ours``/``theirs`` summaries, ``fields`` in conflict). ``events``:
    the source's observations the target lacks. ``relations``: ``added`` and
    ``removed`` (the source's), ``ours_added`` and ``ours_removed``. ``base``:
    where the merge base is. A merge adds ``status`` (``merged``, ``nothing``,
    ``refused``, ``dry_run``), ``applied`` (the frame ids written), ``versions``
    (the versions it committed), ``copied`` (the observations copied, as the
    target's references), ``unresolved`` (conflicts that refused it) and
    ``receipt`` (the rejected one, if the engine refused a planned operation).
    """

    target: str
    source: str
    base: dict[str, Any]
    ours_version: int
    theirs_version: int
    frames: list[dict[str, Any]]
    events: list[dict[str, Any]]
    relations: dict[str, list[list[str]]]
    counts: dict[str, int]
    status: str | None = None
    applied: list[str] | None = None
    versions: list[int] | None = None
    copied: list[str] | None = None
    unresolved: list[str] | None = None
    dropped_sources: list[list[str]] | None = None
    receipt: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where the merge base of a target and a source is: the version *base* of the side
    *held_by* (``target`` or ``source``), and the versions after which each side's
    changes are new (*ours_since*, *theirs_since*)."""

    held_by: Literal["target", "source"]
    base: int
    ours_since: int
    theirs_since: int
    via: str

    def as_dict(self) -> dict[str, Any]:
        return {"held_by": self.held_by, "version": self.base, "via": self.via}


def lineage(target: str, tmeta: Meta, source: str, smeta: Meta) -> Lineage:
    """The merge base of *target* and *source* from their metas; RequestError
    ``no_common_base`` when neither was forked from or merged with the other."""
    t, s = dict(tmeta.branches or {}), dict(smeta.branches or {})
    found: list[tuple[int, Lineage]] = []
    merged = (t.get("merged") or {}).get(source)
    if merged:
        sv, tv = int(merged["source_version"]), int(merged["version"])
        found.append((tv, Lineage("source", sv, tv, sv, "merge")))
    back = (s.get("merged") or {}).get(target)
    if back:
        tv, sv = int(back["source_version"]), int(back["version"])
        found.append((tv, Lineage("target", tv, tv, sv, "merge")))
    if found:
        return max(found, key=lambda item: item[0])[1]
    for holder, other, record in (("target", source, t), ("source", target, s)):
        fork = record.get("fork") or {}
        if fork.get("origin") == other:
            v = int(fork["version"])
            return Lineage(holder, v, v, v, "fork")  # type: ignore[arg-type]
    raise RequestError(
        f"{target} and {source} share no history: neither was forked from the other"
        " nor merged with it",
        code="no_common_base",
    )
