"""The vectors of one index held in memory, and their nearest neighbours.

Up to :data:`EXACT_LIMIT` vectors a search is exact: one matrix-vector product
over every vector (a few milliseconds at that size). Above it, an HNSW graph
(usearch, chosen by ``benchmarks/bench_ann.py``: see docs/search.md) proposes
candidates, which are then scored exactly against the stored vectors, so the
order of what is found never depends on the graph; only *which* documents the
graph finds may (approximate nearest neighbours). Ties rank by label, lower
first. The graph is built in a background thread, started by the first
search above the limit; until it is ready searches stay exact (a scan of
100,000 vectors of 384 dimensions takes about 8 ms, while building their graph
takes a minute on two cores: see docs/search.md). Once built it is kept current
by :meth:`Neighbours.put` and :meth:`Neighbours.remove` (changes made while it
was being built are replayed into it).

The build adds the vectors in chunks of :data:`BUILD_CHUNK` and checks a stop
flag between them: :meth:`Neighbours.close` (called when the index environment
closes) and an ``atexit`` hook stop the builder and join it, so a process that
exits mid-build never ends inside the graph library's threads (which would
abort the interpreter). :meth:`Neighbours.wait_ready` waits for the graph.

Not thread-safe by itself: :class:`~storage.vectors.index.VectorIndex` holds a
lock around every call (the builder thread only touches the graph it builds
and, under this class's own lock, the hand-over).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

EXACT_LIMIT = 20_000
"""Up to this many vectors a search scans them all (exact); above, the HNSW graph proposes."""
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 64
BUILD_CHUNK = 1024
"""Vectors added to the graph between two checks of the builder's stop flag."""

_BUILDING: set[Neighbours] = set()
"""The structures whose graph is being built in this process (stopped at exit)."""
_BUILDING_LOCK = threading.Lock()


@atexit.register
def _stop_builders() -> None:
    """Stop and join every graph build before the interpreter finalizes."""
    with _BUILDING_LOCK:
        building = list(_BUILDING)
    for mem in building:
        mem.close()


class _BuildStopped(Exception):
    """The graph build was stopped (:meth:`Neighbours.close`) before it finished."""


class Neighbours:
    """Unit-length float32 vectors by label, searched by inner product (cosine)."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._keys = np.zeros(0, dtype=np.uint64)
        self._mat = np.zeros((0, dimension), dtype=np.float32)
        self._rows: dict[int, int] = {}
        self._used = 0
        self._free: list[int] = []
        self._ann: Any = None
        self._building = False
        self._pending: list[tuple[int, np.ndarray | None]] = []  # changes during a build
        self._handover = threading.Lock()
        self._stop = threading.Event()
        self._done = threading.Event()  # set when no build is under way
        self._done.set()
        self._builder: threading.Thread | None = None
        self.build_error: BaseException | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, label: int) -> bool:
        return label in self._rows

    def _grow(self, need: int) -> None:
        cap = len(self._keys)
        if need <= cap:
            return
        new = max(need, 2 * cap, 1024)
        keys = np.zeros(new, dtype=np.uint64)
        mat = np.zeros((new, self.dimension), dtype=np.float32)
        keys[:cap] = self._keys
        mat[:cap] = self._mat
        self._keys, self._mat = keys, mat

    def put(self, labels: Sequence[int], vectors: np.ndarray) -> None:
        """Add or replace the vectors of *labels* (rows of *vectors*, unit length)."""
        if not len(labels):
            return
        self._grow(self._used + len(labels))
        replaced: list[int] = []
        for label, vec in zip(labels, vectors, strict=True):
            row = self._rows.get(label)
            if row is None:
                row = self._free.pop() if self._free else self._next()
                self._rows[label] = row
                self._keys[row] = label
            else:
                replaced.append(label)
            self._mat[row] = vec
        with self._handover:
            if self._building:
                self._pending.extend(zip(labels, np.array(vectors, dtype=np.float32), strict=True))
            elif self._ann is not None:
                for label in replaced:
                    self._ann.remove(label)
                self._ann.add(np.asarray(labels, dtype=np.uint64), np.asarray(vectors))

    def _next(self) -> int:
        row = self._used
        self._used += 1
        return row

    def remove(self, labels: Sequence[int]) -> None:
        """Forget the vectors of *labels* (unknown labels are ignored)."""
        for label in labels:
            row = self._rows.pop(label, None)
            if row is None:
                continue
            self._keys[row] = 0
            self._mat[row] = 0.0
            self._free.append(row)
            with self._handover:
                if self._building:
                    self._pending.append((label, None))
                elif self._ann is not None:
                    self._ann.remove(label)

    def search(self, query: np.ndarray, count: int) -> list[tuple[int, float]]:
        """The *count* nearest ``(label, cosine)``, best first (ties: lower label first)."""
        if not self._rows or count <= 0:
            return []
        if len(self._rows) <= EXACT_LIMIT or count >= len(self._rows):
            return self._exact(query, count)
        ann = self._graph()
        if ann is None:  # being built: exact meanwhile
            return self._exact(query, count)
        ann.expansion_search = max(EXPANSION_SEARCH, count)
        matches = ann.search(query, count, threads=1)
        labels = [int(k) for k in np.asarray(matches.keys) if int(k) in self._rows]
        rows = np.fromiter((self._rows[k] for k in labels), dtype=np.int64, count=len(labels))
        scores = self._mat[rows] @ query
        order = np.lexsort((np.asarray(labels, dtype=np.uint64), -scores))
        return [(labels[i], float(scores[i])) for i in order]

    def _exact(self, query: np.ndarray, count: int) -> list[tuple[int, float]]:
        used = self._used
        scores = self._mat[:used] @ query
        keys = self._keys[:used]
        scores = np.where(keys == 0, -np.inf, scores)
        live = len(self._rows)
        count = min(count, live)
        if count < used:
            top = np.argpartition(-scores, count - 1)[:count]
            # Everything scoring like the cut-off competes on its label, as in a full sort.
            cut = scores[top].min()
            top = np.flatnonzero(scores >= cut)
        else:
            top = np.flatnonzero(keys != 0)
        order = np.lexsort((keys[top], -scores[top]))[:count]
        chosen = top[order]
        return [(int(keys[r]), float(scores[r])) for r in chosen]

    @property
    def approximate(self) -> bool:
        """True if searches go through the graph (above :data:`EXACT_LIMIT`, once built)."""
        return self._ann is not None and len(self._rows) > EXACT_LIMIT

    @property
    def needs_graph(self) -> bool:
        """True above :data:`EXACT_LIMIT` vectors: searches then go through the graph."""
        return len(self._rows) > EXACT_LIMIT

    def start_graph(self) -> None:
        """Start building the graph in the background if it is needed and not there yet."""
        if self.needs_graph:
            self._graph()

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to *timeout* seconds for a graph build under way (:meth:`start_graph`).

        True once searches need no more building: the graph is ready, or there
        are :data:`EXACT_LIMIT` vectors or fewer (searches are exact). False on
        timeout, if no build is under way, or if the build failed (kept in
        :attr:`build_error`; searches stay exact and the next one tries again)
        or was stopped (:meth:`close`).
        """
        if not self.needs_graph:
            return True
        self._done.wait(max(0.0, timeout))
        return self._ann is not None

    def close(self, wait: bool = True) -> None:
        """Stop a graph build under way; with *wait*, wait for its thread (one chunk at most).

        Idempotent; no new build starts afterwards (searches without a graph
        are exact). A build left running stops after its current chunk, and the
        exit hook joins it.
        """
        self._stop.set()
        builder = self._builder
        if wait and builder is not None and builder is not threading.current_thread():
            builder.join()

    def _graph(self, wait: bool = False) -> Any:
        """The graph, or None while it is being built (the first call starts the build;
        with *wait*, the build runs here and the graph is returned)."""
        with self._handover:
            if self._ann is not None or self._building or self._stop.is_set():
                return self._ann
            self._building = True
            self._done.clear()
        rows = sorted(self._rows.items())
        labels = np.fromiter((k for k, _ in rows), dtype=np.uint64, count=len(rows))
        idx = np.fromiter((r for _, r in rows), dtype=np.int64, count=len(rows))
        data = self._mat[idx]  # a copy: the build reads it while puts go on
        if wait:
            self._build(labels, data)
            return self._ann
        with _BUILDING_LOCK:
            _BUILDING.add(self)
        self._builder = threading.Thread(
            target=self._build, args=(labels, data), name="morphz-ann", daemon=True
        )
        self._builder.start()
        return None

    def _finished(self) -> None:
        with _BUILDING_LOCK:
            _BUILDING.discard(self)

    def _build(self, labels: np.ndarray, data: np.ndarray) -> None:
        try:
            from usearch.index import Index

            ann = Index(
                ndim=self.dimension,
                metric="ip",
                dtype="f32",
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
            # One thread: the build is in the background, beside the process's real work.
            # In chunks, so that close() (and the exit hook) can stop it between two.
            for start in range(0, len(labels), BUILD_CHUNK):
                if self._stop.is_set():
                    raise _BuildStopped("the graph build was stopped")
                end = start + BUILD_CHUNK
                ann.add(labels[start:end], data[start:end], threads=1)
        except BaseException as e:  # noqa: BLE001 - searches stay exact; kept for the owner
            with self._handover:
                self._building, self._pending = False, []
                if not isinstance(e, _BuildStopped):
                    self.build_error = e
                self._done.set()
            self._finished()
            return
        with self._handover:
            for label, vec in self._pending:
                if ann.contains(label):
                    ann.remove(label)
                if vec is not None:
                    ann.add(label, vec)
            self._pending = []
            self._ann, self._building = ann, False
            self.build_error = None
            self._done.set()
        self._finished()
