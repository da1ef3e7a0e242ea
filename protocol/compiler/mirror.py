"""The compiler's copy of one context's records, brought up to date from the log (R35)."""

from __future__ import annotations

from protocol.compiler.config import MAX_MIRROR_GAP
from protocol.state import Event, Frame, Meta
from protocol.view import ReadView


class Mirror:
    """The records of one context as of the last compile, brought up to date cheaply.

    What can change between two compiles, and how it is found without reading
    everything again:

    * new observations: sequence numbers from the last ``next_seq`` on;
    * claims and deliveries (they bump no version): observations that were
      waiting in the inbox or were pending user requests are read again;
    * everything else bumps the version, and every version's log record lists
      the keys it changed (``changes``, the same list the conflict check's
      ``lastmod`` comes from): those frames, events and edges are read again.

    Anything unexpected (another context, a version or sequence going back, a
    missing log record, a long gap) makes it read everything again.
    """

    __slots__ = ("created", "version", "next_seq", "events", "frames", "relations")

    def __init__(self) -> None:
        self.created: float | None = None
        self.version = -1
        self.next_seq = 0
        self.events: dict[int, Event] = {}
        self.frames: dict[str, Frame] = {}
        self.relations: set[tuple[str, str, str]] = set()

    def load(self, view: ReadView, meta: Meta) -> None:
        """Read every event, frame and relation of *view* again."""
        self.events = {e.seq: e for e in view.iter_events()}
        self.frames = {f.id: f for f in view.iter_frames()}
        self.relations = set(view.iter_relations())
        self._mark(meta)

    def _mark(self, meta: Meta) -> None:
        self.created, self.version, self.next_seq = meta.created, meta.version, meta.next_seq

    def refresh(self, view: ReadView, meta: Meta) -> None:
        """Bring the copy up to *meta* (read from *view*), reading only what may have changed."""
        if (
            self.created != meta.created
            or meta.version < self.version
            or meta.next_seq < self.next_seq
            or meta.version - self.version > MAX_MIRROR_GAP
        ):
            self.load(view, meta)
            return
        events, frames, edges = set(), set(), set()
        for version in range(self.version + 1, meta.version + 1):
            record = view.txlog(version)
            if record is None:
                self.load(view, meta)
                return
            for key in record.get("changes") or ():
                if key.startswith("@e"):
                    events.add(int(key[2:]))
                elif " " in key:
                    parts = key.split(" ")
                    if len(parts) == 3:
                        edges.add((parts[0], parts[1], parts[2]))
                else:
                    frames.add(key)
        events.update(
            seq for seq, e in self.events.items() if e.claimed_tick is None or e.causally_protected
        )
        for seq in events:
            fresh = view.event(seq)
            if fresh is not None:
                self.events[seq] = fresh
        if meta.next_seq > self.next_seq:
            for e in view.iter_events(self.next_seq):
                self.events[e.seq] = e
        for fid in frames:
            f = view.frame(fid)
            if f is not None:
                self.frames[fid] = f
        for edge in edges:
            if view.has_relation(*edge):
                self.relations.add(edge)
            else:
                self.relations.discard(edge)
        self._mark(meta)
