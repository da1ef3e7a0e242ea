"""Diffs between contexts that share a history, and of one context with its past.

The read half of branches (docs/branches.md): :func:`compute` reads the three
sides of a diff (target, source and their merge base, from their meta:
:func:`protocol.branches.lineage`) in one snapshot of each, into a :class:`Diff`
that :mod:`service.branches` writes (merge, pick, revert) and :func:`reply_of`
answers (``diff``, ``changes``, a dry run). Base frames are read from the history
of the side that holds the base (``frame_at``), base relations from its log
(:func:`service.asof.relations_at`).

A source of the same store directory is opened read-only beside the target
(:func:`opened`): LMDB lets that read run beside the source's writer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

from pydantic import Field, Strict

from protocol.branches import (
    BranchReply,
    FrameDiff,
    Lineage,
    classify,
    lineage,
    relation_changes,
)
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.state import Event, Frame
from protocol.view import ReadView
from service.asof import VersionRef, relations_at, resolve
from storage import LmdbStore, context_path
from storage.backend import Backend

if TYPE_CHECKING:
    from service.context import Context

T = TypeVar("T")

ContextName = Annotated[
    str, Strict(), Field(min_length=1, max_length=128, description="A context's name.")
]
"""The name of a context of the same store."""


class Source(NamedTuple):
    """The other side of a diff or merge: its *name* and a *backend* to read it (a
    :class:`~service.context.Context` is one)."""

    name: str
    backend: Backend


def store_dir(ctx: Context) -> Path:
    """The store directory *ctx* lives in; RequestError ``no_store`` for a context
    that is not in one (an in-memory store): pass the source itself then."""
    path = getattr(ctx.backend, "path", None)
    if not isinstance(path, str):
        raise RequestError(
            "this context is not in a store directory: pass the source context itself"
            " (service.diffs.diff_contexts, service.branches.merge_contexts)",
            code="no_store",
        )
    return Path(path).parent


@contextmanager
def opened(ctx: Context, source: str) -> Iterator[Source]:
    """The context *source* of *ctx*'s store directory, opened read-only."""
    root = store_dir(ctx)
    if source == ctx.name:
        raise RequestError("a context cannot be merged with itself", code="same_context")
    path = context_path(root, source)
    if not LmdbStore.exists(path):
        raise NotFound(f"no context {source!r} beside {ctx.name!r}")
    backend = LmdbStore.open(path, readonly=True)
    try:
        yield Source(source, backend)
    finally:
        backend.close()


@dataclass(slots=True)
class Diff:
    lineage: Lineage
    ours_version: int
    theirs_version: int
    frames: list[FrameDiff]
    events: list[Event]
    rel: tuple[list[Any], list[Any], list[Any], list[Any]]


def changed_since(v: ReadView, since: int) -> set[str]:
    return {f.id for f in v.iter_frames() if max(f.updated_version, f.retired_version or 0) > since}


def compute(
    tv: ReadView,
    sv: ReadView,
    lin: Lineage,
    *,
    theirs_at: int | None = None,
    ids: set[str] | None = None,
) -> Diff:
    """The three-way diff of target view *tv* and source view *sv* (the source as of
    *theirs_at* if given), limited to frame ids *ids* if given."""
    base_view = tv if lin.held_by == "target" else sv
    smeta = sv.meta()
    theirs_version = smeta.version if theirs_at is None else theirs_at

    def theirs(fid: str) -> Frame | None:
        return sv.frame(fid) if theirs_at is None else sv.frame_at(fid, theirs_at)

    if ids is not None:
        candidates = set(ids)
    else:
        candidates = changed_since(sv, lin.theirs_since) | changed_since(tv, lin.ours_since)
        if theirs_at is not None:
            candidates = {
                fid
                for fid in candidates
                if sv.frame_at(fid, theirs_at) is not None or tv.frame(fid)
            }
    frames: list[FrameDiff] = []
    for fid in sorted(candidates):
        d = classify(fid, base_view.frame_at(fid, lin.base), tv.frame(fid), theirs(fid))
        if d is not None:
            frames.append(d)
    base_edges = relations_at(base_view, lin.base)
    theirs_edges = set(sv.iter_relations()) if theirs_at is None else relations_at(sv, theirs_at)
    rel = relation_changes(base_edges, set(tv.iter_relations()), theirs_edges)
    if ids is not None:
        rel = (
            [e for e in rel[0] if e[0] in ids or e[2] in ids],
            [e for e in rel[1] if e[0] in ids or e[2] in ids],
            rel[2],
            rel[3],
        )
    events = []
    for e in sv.iter_events():
        if theirs_at is not None and e.seq >= smeta.next_seq:
            break
        if tv.event_seq(e.id) is None:
            events.append(e)
    return Diff(lin, tv.meta().version, theirs_version, frames, events, rel)


def reply_of(target: str, source: str, d: Diff, **extra: Any) -> BranchReply:
    counts = {status: 0 for status in ("added", "changed", "retired", "conflict", "behind")}
    for f in d.frames:
        counts[f.status] += 1
    counts["events"] = len(d.events)
    added, removed, ours_added, ours_removed = d.rel
    counts["relations"] = len(added) + len(removed)
    return BranchReply.of(
        {
            "target": target,
            "source": source,
            "base": d.lineage.as_dict(),
            "ours_version": d.ours_version,
            "theirs_version": d.theirs_version,
            "frames": [f.as_dict() for f in d.frames],
            "events": [
                {"ref": e.ref, "id": e.id, "kind": e.kind, "preview": e.preview} for e in d.events
            ],
            "relations": {
                "added": [list(e) for e in added],
                "removed": [list(e) for e in removed],
                "ours_added": [list(e) for e in ours_added],
                "ours_removed": [list(e) for e in ours_removed],
            },
            "counts": counts,
            **extra,
        }
    )


def pair(
    target: Context | Source, source: Context | Source
) -> Callable[[Callable[[ReadView, ReadView], T]], T]:
    """Run ``fn(target_view, source_view)`` on one snapshot of each."""

    def run(fn: Callable[[ReadView, ReadView], T]) -> T:
        return target.backend.read(lambda tv: source.backend.read(lambda sv: fn(tv, sv)))

    return run


def lineage_of(tv: ReadView, sv: ReadView, target: str, source: str) -> Lineage:
    return lineage(target, tv.meta(), source, sv.meta())


def diff_contexts(target: Context | Source, source: Context | Source) -> BranchReply:
    """What merging *source* into *target* would find (see :class:`BranchReply`)."""

    def read(tv: ReadView, sv: ReadView) -> Diff:
        return compute(tv, sv, lineage_of(tv, sv, target.name, source.name))

    return reply_of(target.name, source.name, pair(target, source)(read))


def diff(ctx: Context, source: ContextName) -> BranchReply:
    """The three-way diff of this context (ours) and *source* (theirs) since their merge
    base: per frame added, changed, retired, conflict or behind; observations added;
    relations added and removed."""
    with opened(ctx, source) as other:
        return diff_contexts(ctx, other)


def changes(
    ctx: Context, from_version: VersionRef, to_version: VersionRef | None = None
) -> BranchReply:
    """What changed in this context between two versions (numbers or tags; *to_version*
    defaults to now): per frame added, changed or retired; the observations recorded in
    between; relations added and removed. ``diff`` of a context with its own past."""

    def read(v: ReadView) -> Diff:
        lo = resolve(v, from_version)
        hi = v.meta().version if to_version is None else resolve(v, to_version)
        if lo > hi:
            raise OutOfRange(f"from version {lo} is after to version {hi}")
        frames: list[FrameDiff] = []
        for f in v.iter_frames():
            if max(f.updated_version, f.retired_version or 0) <= lo:
                continue
            if not any(lo < n <= hi for n in v.frame_history(f.id)):
                continue
            before = v.frame_at(f.id, lo)
            found = classify(f.id, before, before, v.frame_at(f.id, hi))
            if found is not None:
                frames.append(found)
        then = relations_at(v, lo)
        rel = relation_changes(then, then, relations_at(v, hi))
        times = [(v.txlog(n) or {}).get("time") if n else None for n in (lo, hi)]
        events = [
            e
            for e in v.iter_events()
            if (times[0] is None or e.time > times[0]) and (times[1] is None or e.time <= times[1])
        ]
        return Diff(Lineage("target", lo, lo, hi, "versions"), lo, hi, frames, events, rel)

    return reply_of(ctx.name, ctx.name, ctx.backend.read(read))
