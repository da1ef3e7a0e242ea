"""The one narrow seam between the pure engine and a store.

The engine reads a context through a :class:`ReadView` and describes what a
commit writes as a :class:`Changeset`. A store applies a changeset inside one
write transaction through a :class:`WriteView`; whether that is an LMDB write
(:mod:`storage`) or dictionaries (:class:`storage.memory.MemoryBackend`), the
engine cannot tell, and the same contract tests run against both.

A store's write transaction must be all-or-nothing and must let reads inside
it see its own earlier writes (group commit evaluates transaction *n+1*
against the state left by transaction *n*).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocol.state import Event, Frame, Meta


class ReadView(Protocol):
    """Read access to one context at one point in time."""

    def meta(self) -> Meta:
        """The context's counters."""

    def frame(self, frame_id: str) -> Frame | None:
        """The current frame *frame_id*, or None."""

    def event(self, seq: int) -> Event | None:
        """The event with sequence number *seq* (``@e<seq>``), or None."""

    def event_seq(self, event_id: str) -> int | None:
        """The sequence number of the event with stable id *event_id*, or None."""

    def event_content(self, seq: int) -> str | None:
        """The full original text of an event, or None."""

    def event_chunk(self, seq: int, offset: int, length: int) -> str | None:
        """Characters ``[offset, offset+length)`` of an event's text, or None if unknown."""

    def has_relation(self, subject: str, label: str, obj: str) -> bool:
        """True if the edge exists."""

    def relations_from(self, subject: str) -> list[tuple[str, str]]:
        """``(label, object)`` pairs of edges leaving *subject*, sorted."""

    def relations_to(self, obj: str) -> list[tuple[str, str]]:
        """``(subject, label)`` pairs of edges arriving at *obj*, sorted."""

    def cited_by(self, source: str) -> list[str]:
        """Ids of the frames whose ``sources`` include *source* (a frame id or event id), sorted."""

    def lastmod(self, key: str) -> int:
        """The last version that changed footprint key *key*; 0 if none."""

    def client(self, client_id: str) -> tuple[int, bytes] | None:
        """``(version, digest)`` of the committed transaction that used *client_id*."""

    def txlog(self, version: int) -> dict[str, Any] | None:
        """The transaction-log record committed at *version*."""

    def due(self, upto_tick: int) -> list[tuple[int, str, int, int]]:
        """Pending finalizations ``(due_tick, frame_id, gen, revision)`` due by *upto_tick*."""

    def inbox(self) -> list[int]:
        """Sequence numbers of observations waiting to be claimed, oldest first."""

    def frame_history(self, frame_id: str) -> list[int]:
        """Versions whose transactions wrote *frame_id* (derive/revise/lifecycle), ascending."""

    def frame_at(self, frame_id: str, version: int) -> Frame | None:
        """The frame as it stood after *version* committed (an as-of read), or None."""

    def traces(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* model-call traces numbered above *after*, oldest first (R39)."""

    def iter_frames(self) -> Iterator[Frame]:
        """Every frame, by id."""

    def iter_events(self, start_seq: int = 1) -> Iterator[Event]:
        """Every event from *start_seq*, by sequence number."""

    def iter_relations(self) -> Iterator[tuple[str, str, str]]:
        """Every edge ``(subject, label, object)``, sorted."""


@dataclass(slots=True)
class Changeset:
    """Everything one committed transaction (or claim, or observation) writes."""

    meta: Meta | None = None
    frames: list[Frame] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    contents: list[tuple[int, str]] = field(default_factory=list)
    rel_add: list[tuple[str, str, str]] = field(default_factory=list)
    rel_del: list[tuple[str, str, str]] = field(default_factory=list)
    cites_add: list[tuple[str, str]] = field(default_factory=list)
    """``(source, frame id)``: *frame id* now lists *source*. Sources only ever grow."""
    lastmod: dict[str, int] = field(default_factory=dict)
    due_add: list[tuple[int, str, int, int]] = field(default_factory=list)
    due_del: list[tuple[int, str]] = field(default_factory=list)
    inbox_add: list[int] = field(default_factory=list)
    inbox_del: list[int] = field(default_factory=list)
    client: tuple[str, int, bytes | bytearray] | None = None
    txlog: dict[str, Any] | None = None
    history: list[tuple[str, int]] = field(default_factory=list)
    """``(frame id, version)``: the frame's record in ``frames`` is kept as of that version."""
    outbox: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None
    """A model-call trace to append (which frames took part in the call, R39)."""
    audit: list[dict[str, Any]] = field(default_factory=list)
    """Audit records to append (:func:`protocol.governance.append_audit`): they change
    neither the version nor the state, only the context's audit table."""


class WriteView(ReadView, Protocol):
    """A read view that can also apply a changeset; all-or-nothing at its end."""

    def apply(self, changes: Changeset) -> None:
        """Write *changes*; later reads through this view see them."""


class BatchView:
    """A write view that remembers, for one group commit, what it read and wrote.

    Group commit decides many transactions inside one store write; most of them
    read the same meta record and often the same frames. This wrapper serves
    those repeated reads from memory and keeps them current as changesets are
    applied, so each transaction pays for decoding a record once per batch at
    most. Records handed out are shared: the engine treats them as read-only
    (it copies before changing anything).
    """

    __slots__ = ("_w", "_meta", "_meta_dirty", "_frames", "_events")

    def __init__(self, inner: WriteView) -> None:
        self._w = inner
        self._meta: Meta | None = None
        self._meta_dirty = False
        self._frames: dict[str, Frame | None] = {}
        self._events: dict[int, Event | None] = {}

    def meta(self) -> Meta:
        if self._meta is None:
            self._meta = self._w.meta()
        return self._meta

    def frame(self, frame_id: str) -> Frame | None:
        frames = self._frames
        if frame_id in frames:
            return frames[frame_id]
        f = frames[frame_id] = self._w.frame(frame_id)
        return f

    def event(self, seq: int) -> Event | None:
        events = self._events
        if seq in events:
            return events[seq]
        e = events[seq] = self._w.event(seq)
        return e

    # The other reads the engine makes while deciding a transaction pass straight
    # through (named here rather than found by __getattr__ on every call).

    def event_seq(self, event_id: str) -> int | None:
        return self._w.event_seq(event_id)

    def has_relation(self, subject: str, label: str, obj: str) -> bool:
        return self._w.has_relation(subject, label, obj)

    def relations_from(self, subject: str) -> list[tuple[str, str]]:
        return self._w.relations_from(subject)

    def relations_to(self, obj: str) -> list[tuple[str, str]]:
        return self._w.relations_to(obj)

    def lastmod(self, key: str) -> int:
        return self._w.lastmod(key)

    def client(self, client_id: str) -> tuple[int, bytes] | None:
        return self._w.client(client_id)

    def txlog(self, version: int) -> dict[str, Any] | None:
        return self._w.txlog(version)

    def apply(self, changes: Changeset) -> None:
        """Apply *changes*; the meta record is written once, by :meth:`flush`."""
        if changes.meta is not None:
            self._meta = changes.meta
            self._meta_dirty = True
            changes.meta = None
        self._w.apply(changes)
        for f in changes.frames:
            self._frames[f.id] = f
        for e in changes.events:
            self._events[e.seq] = e

    def flush(self) -> None:
        """Write the latest meta record; call once before the store write ends."""
        if self._meta_dirty and self._meta is not None:
            self._w.apply(Changeset(meta=self._meta))
            self._meta_dirty = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)
