"""The state of one transaction being decided: a copy-on-write overlay over a read view.

:class:`Overlay` reads through to the :class:`~protocol.view.ReadView` and copies
a frame or event the first time an operation writes it, so the view itself is
never touched: a rejected transaction leaves nothing behind (R8).
:class:`Decision` adds what the operations did so far, which the successor rule
and the log record read afterwards. :class:`OpFailure` is how an operation
refuses; the evaluation turns it into a rejected receipt naming the operation.
"""

from __future__ import annotations

from typing import Any

from protocol.ids import SUPERSEDES
from protocol.state import Event, Frame, Meta
from protocol.tx import ContextTx
from protocol.view import ReadView


class OpFailure(Exception):
    """An operation refused: a stable error *code* and a message for the receipt."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Overlay:
    """Copy-on-write view of frames, events and edges during one evaluation.

    ``frames``/``events`` hold every record read or written; a record is
    unchanged while it is the very object in ``initial_frames``/``initial_events``.
    """

    __slots__ = (
        "view",
        "frames",
        "initial_frames",
        "events",
        "initial_events",
        "rel_add",
        "rel_del",
    )

    def __init__(self, view: ReadView) -> None:
        self.view = view
        self.frames: dict[str, Frame | None] = {}
        self.initial_frames: dict[str, Frame | None] = {}
        self.events: dict[int, Event] = {}
        self.initial_events: dict[int, Event] = {}
        self.rel_add: set[tuple[str, str, str]] = set()
        self.rel_del: set[tuple[str, str, str]] = set()

    def frame(self, frame_id: str) -> Frame | None:
        """The frame as the operations so far left it; None if there is none."""
        if frame_id in self.frames:
            return self.frames[frame_id]
        f = self.view.frame(frame_id)
        self.frames[frame_id] = f
        self.initial_frames[frame_id] = f
        return f

    def writable_frame(self, frame_id: str) -> Frame:
        """The existing frame *frame_id*, copied on its first write."""
        f = self.frame(frame_id)
        assert f is not None
        initial = self.initial_frames.get(frame_id)
        if f is initial:
            f = f.copy()
            self.frames[frame_id] = f
        return f

    def put_new_frame(self, f: Frame) -> None:
        """Add a frame that did not exist before."""
        self.frame(f.id)
        self.frames[f.id] = f

    def event(self, seq: int) -> Event | None:
        """The event as the operations so far left it; None if there is none."""
        if seq in self.events:
            return self.events[seq]
        e = self.view.event(seq)
        if e is not None:
            self.initial_events[seq] = e
            self.events[seq] = e
        return e

    def writable_event(self, seq: int) -> Event:
        """The existing event *seq*, copied on its first write."""
        e = self.event(seq)
        assert e is not None
        if e is self.initial_events[seq]:
            e = e.copy()
            self.events[seq] = e
        return e

    def has_relation(self, s: str, label: str, o: str) -> bool:
        """Whether the edge exists after the operations so far."""
        t = (s, label, o)
        if t in self.rel_add:
            return True
        if t in self.rel_del:
            return False
        return self.view.has_relation(s, label, o)

    def successors(self, obj: str) -> list[str]:
        """The frames that ``supersedes`` *obj* after the operations so far, sorted."""
        subs = {s for s, lab in self.view.relations_to(obj) if lab == SUPERSEDES}
        subs |= {s for (s, lab, o) in self.rel_add if lab == SUPERSEDES and o == obj}
        subs -= {s for (s, lab, o) in self.rel_del if lab == SUPERSEDES and o == obj}
        return sorted(subs)


class Decision:
    """One transaction being decided: its overlay and what its operations did so far."""

    __slots__ = (
        "ov",
        "meta",
        "tx",
        "version",
        "marked",
        "sourced",
        "supersede_objects",
        "restored_subjects",
        "edges_changed",
        "writes",
        "fields_changed",
        "edits",
        "field_indexes",
        "edit_work",
    )

    def __init__(self, ov: Overlay, meta: Meta, tx: ContextTx, version: int) -> None:
        self.ov = ov
        self.meta = meta
        self.tx = tx
        self.version = version
        """The version the transaction commits at if it commits."""
        self.marked: set[str] = set()
        """Frames named by a retire (candidates of the successor rule)."""
        self.sourced: set[str] = set()
        """Frames cited as sources by a derive or revise."""
        self.supersede_objects: set[str] = set()
        self.restored_subjects: set[str] = set()
        self.edges_changed: set[tuple[str, str, str]] = set()
        self.writes: list[dict[str, Any]] = []
        """The log's ``writes``: which frame each derive, revise, envelope or field edit wrote."""
        self.fields_changed: dict[str, set[str] | None] = {}
        """Frame id → the fields its body writes changed; None: rewritten as a whole."""
        self.edits: list[tuple[int, str, str, int, str]] = []
        """The receipt's ``edits``: ``(op index, frame, field, revision, outcome)``."""
        self.field_indexes: dict[str, tuple[tuple[Any, ...], dict[str, int]]] = {}
        """Frame id → the body its last field edit left and that body's field index, so
        the next edit of the same body does not read its fields again."""
        self.edit_work = 0
        """Forms the field edits so far copied (bounded by ``protocol.fields.MAX_EDIT_WORK``)."""

    def note_fields(self, frame_id: str, names: set[str] | None) -> None:
        """Record that the body of *frame_id* changed in fields *names* (None: as a whole)."""
        known = self.fields_changed.get(frame_id, set())
        if names is None or known is None:
            self.fields_changed[frame_id] = None
        else:
            known.update(names)
            self.fields_changed[frame_id] = known
