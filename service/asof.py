"""The whole graph as of a version or a tag, and named snapshots (tags) (docs/branches.md).

A **tag** names a version of a context: ``tag(ctx, "before-refactor")``. Tags live in
the context's meta (``branches.tags``), written in one durable write that changes
neither the version nor the state. A version argument of an as-of read is a number
or a tag's name.

:class:`AsOfView` is a :class:`~protocol.view.ReadView` of a context as it stood
when a version committed, built on the current view: a frame is the last row of
its history at or before that version (what ``frame_at`` reads), the relations
are the current ones with the log's ``relate`` and ``unrelate`` after the version
undone, and the observations are those recorded by that version's commit time.
Every read that takes a view (``state``, ``recall``) therefore runs unchanged on
the past. Its cost is one history lookup per frame plus one pass over the log
records after the version.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, Strict

import service.reads as reads
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.recall import RecallPage, RecallRequest, recall
from protocol.replies import Reply, StateReply
from protocol.state import ACTIVE, Event, Frame, Meta
from protocol.tx import Relate, Unrelate
from protocol.view import Changeset, ReadView, WriteView
from service.reads import logged_tx
from service.registry import MAX_REF_CHARS, Count

if TYPE_CHECKING:
    from service.context import Context

MAX_TAGS = 1000
"""Most tags one context keeps."""
TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._/-]{0,63}")
"""A tag's name: a letter, then up to 63 letters, digits, ``.``, ``_``, ``/`` or ``-``."""

TagName = Annotated[str, Strict(), Field(max_length=64, description="A tag's name.")]
"""A tag name argument."""
VersionRef = Annotated[
    Annotated[int, Strict(), Field(ge=0, le=1 << 62)]
    | Annotated[str, Strict(), Field(max_length=64)],
    Field(description="A version number or the name of a tag."),
]
"""A version argument: a number, or a tag's name."""


class TagReply(Reply):
    """A tag: its *name* and the *version* it names."""

    name: str
    version: int


def branches_of(meta: Meta) -> dict[str, Any]:
    """The context's branch record (fork origin, merges, tags): a fresh dict."""
    return dict(meta.branches or {})


def tags_of(meta: Meta) -> dict[str, int]:
    """The tags of a context by name."""
    return dict(branches_of(meta).get("tags") or {})


def resolve(v: ReadView, at: int | str) -> int:
    """The version *at* names (a number, or a tag); OutOfRange after the current version,
    NotFound for an unknown tag."""
    meta = v.meta()
    if isinstance(at, str) and at.isdigit() and len(at) < 19:  # a number sent as text (a URL)
        at = int(at)
    if isinstance(at, str):
        _check_name(at)
        tags = tags_of(meta)
        if at not in tags:
            raise NotFound(
                f"no tag {at[:64]!r}" + (f"; tags: {', '.join(sorted(tags))[:200]}" if tags else "")
            )
        return tags[at]
    if not 0 <= at <= meta.version:
        raise OutOfRange(
            f"version {at} is not between 0 and {meta.version}",
            code="future_version" if at > meta.version else None,
        )
    return at


def _check_name(name: str) -> None:
    if not TAG_NAME.fullmatch(name):
        raise RequestError(
            f"a tag name is a letter then letters, digits, . _ / -, at most 64: {name[:64]!r}",
            code="bad_tag",
        )


def tag(ctx: Context, name: TagName, version: Count | None = None) -> TagReply:
    """Name *version* (default: the current one) *name*: a snapshot an as-of read,
    a diff or a revert can name. A name already given is refused ``tag_exists``."""
    _check_name(name)

    def run(w: WriteView) -> TagReply:
        meta = w.meta()
        at = meta.version if version is None else resolve(w, version)
        record = branches_of(meta)
        tags = dict(record.get("tags") or {})
        if name in tags:
            raise RequestError(f"tag {name} already names version {tags[name]}", code="tag_exists")
        if len(tags) >= MAX_TAGS:
            raise OutOfRange(f"a context keeps at most {MAX_TAGS} tags")
        tags[name] = at
        record["tags"] = tags
        new = meta.copy()
        new.branches = record
        w.apply(Changeset(meta=new))
        return TagReply(name=name, version=at)

    reply: TagReply = ctx.backend.transact(run)
    return reply


def tags(ctx: Context) -> list[TagReply]:
    """Every tag of the context, by name, with the version each names (what `tag` wrote)."""
    held = tags_of(ctx.backend.read(lambda v: v.meta()))
    return [TagReply(name=n, version=held[n]) for n in sorted(held)]


def untag(ctx: Context, name: TagName) -> TagReply:
    """Remove tag *name* (the version it named stays as it is); NotFound if unknown."""

    def run(w: WriteView) -> TagReply:
        meta = w.meta()
        record = branches_of(meta)
        held = dict(record.get("tags") or {})
        if name not in held:
            raise NotFound(f"no tag {name[:64]!r}")
        version = held.pop(name)
        record["tags"] = held
        new = meta.copy()
        new.branches = record
        w.apply(Changeset(meta=new))
        return TagReply(name=name, version=version)

    reply: TagReply = ctx.backend.transact(run)
    return reply


def relations_at(v: ReadView, version: int) -> set[tuple[str, str, str]]:
    """The relations as they stood when *version* committed: the current ones with every
    later ``relate``/``unrelate`` of the log undone (newest first)."""
    edges = set(v.iter_relations())
    for n in range(v.meta().version, version, -1):
        rec = v.txlog(n)
        if rec is None or rec.get("kind") != "model":
            continue
        text = rec.get("text")
        if text is not None and "relate" not in text:
            continue
        for op in reversed(logged_tx(rec).ops):
            if isinstance(op, Unrelate):
                edges.add((op.subject, op.label, op.object))
            elif isinstance(op, Relate):
                edges.discard((op.subject, op.label, op.object))
    return edges


def frames_at(v: ReadView, version: int) -> Iterator[Frame]:
    """Every frame as it stood when *version* committed, by id."""
    for f in v.iter_frames():
        if f.created_version > version:
            continue
        if f.updated_version <= version:
            yield f
            continue
        old = v.frame_at(f.id, version)
        if old is not None:
            yield old


class AsOfView:
    """A read view of a context as it stood when *version* committed (module docstring)."""

    def __init__(self, view: ReadView, version: int) -> None:
        self._v = view
        self.version = version
        rec = view.txlog(version) if version else None
        self._time = None if rec is None else rec.get("time")
        self._tick = 0 if rec is None else int(rec.get("tick") or 0)
        self._edges: set[tuple[str, str, str]] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._v, name)

    def meta(self) -> Meta:
        m = self._v.meta().copy()
        m.version, m.tick = self.version, self._tick
        return m

    def frame(self, frame_id: str) -> Frame | None:
        return self._v.frame_at(frame_id, self.version)

    def iter_frames(self) -> Iterator[Frame]:
        return frames_at(self._v, self.version)

    def _relations(self) -> set[tuple[str, str, str]]:
        if self._edges is None:
            self._edges = relations_at(self._v, self.version)
        return self._edges

    def iter_relations(self) -> Iterator[tuple[str, str, str]]:
        return iter(sorted(self._relations()))

    def has_relation(self, subject: str, label: str, obj: str) -> bool:
        return (subject, label, obj) in self._relations()

    def relations_from(self, subject: str) -> list[tuple[str, str]]:
        return sorted((lb, o) for s, lb, o in self._relations() if s == subject)

    def relations_to(self, obj: str) -> list[tuple[str, str]]:
        return sorted((s, lb) for s, lb, o in self._relations() if o == obj)

    def _event(self, e: Event | None) -> Event | None:
        if e is None or self._time is None or e.time > self._time:
            return None
        if e.retired_version is not None and e.retired_version > self.version:
            e = e.copy()
            e.lifecycle, e.retired_version = ACTIVE, None
        return e

    def event(self, seq: int) -> Event | None:
        return self._event(self._v.event(seq))

    def iter_events(self, start_seq: int = 1) -> Iterator[Event]:
        for e in self._v.iter_events(start_seq):
            old = self._event(e)
            if old is not None:
                yield old

    def inbox(self) -> list[int]:
        return []


def state_at(ctx: Context, at: VersionRef) -> StateReply:
    """The whole context as it stood when *at* (a version or a tag) committed: every
    frame, relation and observation of that time, as ``state`` shows the present."""

    def read(v: ReadView) -> dict[str, Any]:
        return reads.state(AsOfView(v, resolve(v, at)), ctx.name)

    return StateReply.of(ctx.backend.read(read))


class RecallAtReply(Reply):
    """One page of an as-of recall: the nodes, the edges completed on the page, the next
    cursor (None on the last page) and the version the page was read *as of*."""

    nodes: list[dict[str, Any]]
    edges: list[dict[str, str]]
    next_cursor: str | None
    version: int


def recall_at(
    ctx: Context,
    at: VersionRef,
    request: RecallRequest | dict[str, Any] | str,
    cursor: Annotated[str, Strict(), Field(max_length=MAX_REF_CHARS)] | None = None,
) -> RecallAtReply:
    """One page of graph recall over the context as it stood at *at* (a version or a
    tag); read only, not recorded. A cursor continues only the same as-of recall."""
    req = request if isinstance(request, RecallRequest) else RecallRequest.parse(request)

    def read(v: ReadView) -> RecallPage:
        return recall(AsOfView(v, resolve(v, at)), req, cursor)

    page: RecallPage = ctx.backend.read(read)
    return RecallAtReply.of(page.to_dict())


def now() -> float:
    """The commit time of a branch operation."""
    return time.time()
