"""The vector index of one context: embeddings of its frames and events, fed by the outbox.

Like the lexical index (:mod:`storage.search.index`) it is a projection in an
LMDB environment of its own (``<context dir>/vectors/``, layout in
:mod:`storage.vectors.format`) that reads the context's outbox: every commit
and observation writes an intent ``{"version", "frames", "events"}`` in the
same durable write, and :meth:`VectorIndex.apply_intents` embeds what the
intents name, outside any transaction, then stores the vectors durably with
the model's id and dimension. Embedding never runs inside a commit: a commit
only appends the intent, and a worker thread (:class:`~storage.vectors.worker.VectorWorker`)
embeds behind it; a search reports how far behind (``lag``).

What is embedded: an event's text, a frame's id and printed body
(:func:`storage.search.frame_text`, the text the lexical index uses), in pieces
the model reads whole (the embedder's token budget,
:func:`storage.embeddings.token_budget`; :func:`~storage.vectors.chunking.chunks`,
at most :data:`~storage.vectors.format.MAX_EMBED_CHUNKS` pieces) pooled into one
vector. A document is re-embedded only when that text changed (a digest is kept),
so lifecycle, trust and valid-time changes only rewrite its filter record. Retired
content keeps its vector (it stays findable); forgotten content is replaced by its
tombstone's vector.

Rebuilds: an index of another format, context, model id or dimension is
emptied and re-embedded from the durable records; an index that missed
intents (they were acknowledged without it) is re-synchronized: every record
is re-read and only the documents whose text changed are embedded again. A
rebuild proceeds in pages, each its own durable write, so it survives a crash
and searches answer from what is there meanwhile (with the lag).

The nearest-neighbour structure lives in memory (:mod:`storage.vectors.neighbours`),
loaded from the durable vectors at the first search of a process and updated
by this process's writes; a write by another process (the ``generation`` in
the state changed) makes the next search reload it.

The module is long (over 600 lines) because the index is one state machine
over one LMDB environment: incremental updates, the paged rebuild, the
writes they share and the filtered search all read and advance the same
:class:`~storage.vectors.format.VectorState`, and splitting them would spread
its invariants over several files.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import lmdb
import numpy as np

from protocol.errors import OutOfRange, RequestError, StoreError
from protocol.view import ReadView
from storage.derived import DerivedIndex, IntentSource, ack, open_env
from storage.embeddings import Embedder, token_budget
from storage.environment import DEFAULT_MAP_SIZE, Environment
from storage.search import frame_text
from storage.vectors.chunking import chunks
from storage.vectors.documents import (
    SNIPPET_CHARS,
    VectorHit,
    VectorResult,
    _Doc,
    _event_doc,
    _frame_doc,
    _lead,
    _unit,
    pooled,
)
from storage.vectors.filters import VectorFilter, make_filter
from storage.vectors.format import (
    VECTOR_DIR,
    VECTOR_FORMAT,
    DocRecord,
    VectorState,
    key_label,
    label_key,
    state_key,
)
from storage.vectors.neighbours import Neighbours

T = TypeVar("T")

DEFAULT_BATCH = 64
"""Intents applied per :meth:`VectorIndex.apply_intents` call."""
EMBED_BATCH = 64
"""Texts sent to the embedder per call."""
SYNC_PAGE = 256
"""Documents re-read (and embedded where changed) per durable write of a rebuild."""
MAX_LIMIT = 1000
"""Most hits one search returns."""
MAX_CANDIDATES = 65_536
"""Most nearest neighbours looked at to fill a filtered search (then ``approximate``)."""
MAP_SIZE = DEFAULT_MAP_SIZE
"""Initial map of the vector environment; it doubles whenever a write fills it."""
_DBS = ("meta", "docs", "vecs", "frame_ids")


class _Shared(Environment):
    """The vector environment, plus the neighbour structure in memory (one per process)."""

    def __init__(
        self, key: str, env: lmdb.Environment, dbs: dict[str, lmdb._Database], what: str
    ) -> None:
        super().__init__(key, env, dbs, what)
        self.mem_lock = threading.Lock()
        self.memory: Neighbours | None = None
        self.memory_generation = -1

    def close(self) -> None:
        self.set_memory(None, -1)
        super().close()

    def set_memory(self, memory: Neighbours | None, generation: int) -> None:
        """Replace the structure in memory, stopping the old one's graph build (not waiting:
        the builder only touches its own copy of the vectors)."""
        old, self.memory, self.memory_generation = self.memory, memory, generation
        if old is not None and old is not memory:
            old.close(wait=False)


class _Abort(Exception):
    """Another writer applied these intents first."""


class VectorIndex(DerivedIndex[_Shared]):
    """The vector index of one context, kept in ``<context dir>/vectors/``; see the module doc.

    Safe to share between threads (one in-memory neighbour structure per
    directory and process); several processes may update one index (LMDB
    serializes their writes; a write that finds the intents applied by another
    is dropped).
    """

    WHAT = "vector index"

    @classmethod
    def _open_shared(cls, key: str) -> _Shared:
        return open_env(key, _DBS, cls.WHAT, MAP_SIZE, _Shared)

    @classmethod
    def open(
        cls, context_dir: str | os.PathLike[str], *, backend: IntentSource | None = None
    ) -> VectorIndex:
        """Open (creating if needed) the vector index of the context at *context_dir*."""
        path = os.path.join(os.fspath(context_dir), VECTOR_DIR)
        return cls(cls._acquire(path), path, backend)

    @classmethod
    def for_backend(cls, backend: Any) -> VectorIndex:
        """The vector index of the context whose store is *backend* (an LMDB store)."""
        return cls.open(cls._backend_dir(backend), backend=backend)

    @staticmethod
    def exists(context_dir: str | os.PathLike[str]) -> bool:
        """True if the context at *context_dir* has a vector index directory."""
        return os.path.isdir(os.path.join(os.fspath(context_dir), VECTOR_DIR))

    # -- state ---------------------------------------------------------------

    def _load_state(self, txn: lmdb.Transaction[bytes]) -> VectorState:
        return VectorState.decode(txn.get(state_key(), db=self._shared.dbs["meta"]))

    def _save_state(self, txn: lmdb.Transaction[bytes], state: VectorState) -> None:
        txn.put(state_key(), state.encode(), db=self._shared.dbs["meta"])

    def state(self) -> VectorState:
        """The index's counters as last committed."""
        return self._read(self._load_state)

    def applied(self) -> int:
        """The number of the last outbox intent applied (what the outbox may drop up to)."""
        state = self.state()
        return state.applied if state.usable else 0

    def lag(self, backend: IntentSource | None = None) -> int:
        """How many outbox intents are not embedded yet."""
        return max(0, self._source(backend).outbox_last() - self.applied())

    # -- updates ---------------------------------------------------------------

    def apply_intents(
        self,
        embedder: Embedder,
        backend: IntentSource | None = None,
        limit: int = DEFAULT_BATCH,
    ) -> int:
        """Embed what up to *limit* pending intents name, in one durable write; return how many.

        While a rebuild is under way each call instead advances it by one page
        (the return value is then the documents it covered, at least 1 until it
        is done). 0 means there was nothing to do.
        """
        if limit < 1:
            raise OutOfRange(f"limit must be at least 1, not {limit}")
        source = self._source(backend)
        model, dimension = self._model(embedder)
        created = source.read(lambda v: v.meta().created)
        state = self.state()
        if (
            not state.usable
            or state.created != created
            or state.model_id != model
            or state.dimension != dimension
        ):
            self._reset(source, created, model, dimension)
            state = self.state()
        if state.syncing:
            return self._sync_page(embedder, source, state)
        intents = source.outbox_read(state.applied, limit)
        if not intents or intents[0][0] != state.applied + 1:
            if not intents and source.outbox_last() <= state.applied:
                return 0
            # Intents were acknowledged that this index never applied: re-synchronize.
            self._start_sync(source, state.generation)
            return self._sync_page(embedder, source, self.state())
        frames: set[str] = set()
        events: set[int] = set()
        version = state.indexed_version
        for _, intent in intents:
            frames.update(intent.get("frames") or ())
            events.update(int(s) for s in intent.get("events") or ())
            version = max(version, int(intent.get("version") or 0))

        def collect(view: ReadView) -> list[_Doc]:
            docs = [_event_doc(view, e) for s in sorted(events) if (e := view.event(s))]
            found = [f for f in (view.frame(fid) for fid in sorted(frames)) if f is not None]
            found.sort(key=lambda f: (f.created_version, f.id))
            return docs + [_frame_doc(view, f) for f in found]

        docs = source.read(collect)
        upto = intents[-1][0]

        def advance(st: VectorState) -> None:
            st.applied, st.indexed_version = upto, version

        if self._store(embedder, docs, state, advance):
            ack(source, upto)
        return len(intents)

    def catch_up(self, embedder: Embedder, backend: IntentSource | None = None) -> int:
        """Apply intents (and finish a rebuild) until nothing is pending; return the steps."""
        total = 0
        while n := self.apply_intents(embedder, backend):
            total += n
        return total

    def rebuild(self, embedder: Embedder, backend: IntentSource | None = None) -> dict[str, Any]:
        """Drop every vector and embed the context's records again, to the end.

        Returns ``{"indexed_version", "documents", "seconds", "applied", "model"}``.
        """
        source = self._source(backend)
        started = time.perf_counter()
        model, dimension = self._model(embedder)
        self._reset(source, source.read(lambda v: v.meta().created), model, dimension)
        self.catch_up(embedder, source)
        state = self.state()
        return {
            "indexed_version": state.indexed_version,
            "documents": state.documents,
            "seconds": round(time.perf_counter() - started, 3),
            "applied": state.applied,
            "model": state.model_id,
        }

    @staticmethod
    def _model(embedder: Embedder) -> tuple[str, int]:
        model, dimension = embedder.model_id, embedder.dimension
        if not isinstance(model, str) or not model:
            raise RequestError("an embedder needs a model id", code="bad_embedder")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or not 0 < dimension:
            raise RequestError(f"bad embedding dimension {dimension!r}", code="bad_embedder")
        return model, dimension

    def _reset(self, source: IntentSource, created: float, model: str, dimension: int) -> None:
        """Empty the index for *model* and start a rebuild from the context's records."""
        target = source.outbox_last()
        version = source.read(lambda v: v.meta().version)
        dbs = self._env().dbs

        def run(txn: lmdb.Transaction[bytes]) -> None:
            old = self._load_state(txn)
            for name in ("docs", "vecs", "frame_ids"):
                txn.drop(dbs[name], delete=False)
            state = VectorState(
                format=VECTOR_FORMAT,
                created=created,
                model_id=model,
                dimension=dimension,
                generation=old.generation + 1,
                syncing=True,
                sync_target=target,
                sync_version=version,
            )
            self._save_state(txn, state)

        self._write(run)
        with self._shared.mem_lock:
            self._shared.set_memory(None, -1)

    def _start_sync(self, source: IntentSource, generation: int) -> None:
        target = source.outbox_last()
        version = source.read(lambda v: v.meta().version)

        def run(txn: lmdb.Transaction[bytes]) -> None:
            state = self._load_state(txn)
            if state.generation != generation or state.syncing:
                return  # another writer moved first
            state.syncing, state.sync_seq, state.sync_frames = True, 0, False
            state.sync_target, state.sync_version = target, version
            state.extra = {**state.extra, "sync_frame": ""}
            state.generation += 1
            self._save_state(txn, state)

        self._write(run)

    def _sync_page(self, embedder: Embedder, source: IntentSource, state: VectorState) -> int:
        """Advance a rebuild by one page of events or frames; return the documents covered."""
        after_seq, after_frame = state.sync_seq, str(state.extra.get("sync_frame", ""))
        if not state.sync_frames:

            def events(view: ReadView) -> list[_Doc]:
                page = itertools.islice(view.iter_events(after_seq + 1), SYNC_PAGE)
                return [_event_doc(view, e) for e in page]

            docs = source.read(events)

            def advance(st: VectorState) -> None:
                if docs:
                    st.sync_seq = docs[-1].label or st.sync_seq
                else:
                    st.sync_frames = True

        else:

            def frames(view: ReadView) -> list[_Doc]:
                ids = sorted(f.id for f in view.iter_frames() if f.id > after_frame)[:SYNC_PAGE]
                found = [f for f in (view.frame(i) for i in ids) if f is not None]
                return [_frame_doc(view, f) for f in found]

            docs = source.read(frames)

            def advance(st: VectorState) -> None:
                if docs:
                    st.extra = {**st.extra, "sync_frame": docs[-1].ident}
                else:
                    st.syncing = False
                    st.applied = max(st.applied, st.sync_target)
                    st.indexed_version = max(st.indexed_version, st.sync_version)

        finished = state.sync_frames and not docs
        if self._store(embedder, docs, state, advance) and finished:
            ack(source, state.sync_target)
        return max(1, len(docs))

    def _store(
        self,
        embedder: Embedder,
        docs: list[_Doc],
        expect: VectorState,
        advance: Callable[[VectorState], None],
    ) -> bool:
        """Embed the documents of *docs* whose text changed and write them with the state
        *advance* makes; False (nothing written) if another writer changed the state first."""
        dbs = self._env().dbs

        def known(txn: lmdb.Transaction[bytes]) -> None:
            for d in docs:
                if d.label is None:
                    raw = txn.get(d.ident.encode(), db=dbs["frame_ids"])
                    d.label = None if raw is None else key_label(raw)
                old = None if d.label is None else txn.get(label_key(d.label), db=dbs["docs"])
                if old is not None and DocRecord.decode(old).digest == d.record.digest:
                    d.vector = np.zeros(0, dtype=np.float32)  # marks "keep the vector"

        self._read(known)
        todo = [d for d in docs if d.vector is None]
        # Each document is one or more pieces the model reads whole (its token budget);
        # batches are of pieces, pooled per document.
        budget = token_budget(embedder)
        pieces = [(d, piece) for d in todo for piece in chunks(d.text, budget)]
        parts: dict[int, list[np.ndarray]] = {}
        for i in range(0, len(pieces), EMBED_BATCH):
            batch = pieces[i : i + EMBED_BATCH]
            vectors = embedder.embed([p for _, p in batch], kind="document")
            if not isinstance(vectors, list) or len(vectors) != len(batch):
                raise StoreError(
                    f"the embedder returned {len(vectors) if isinstance(vectors, list) else '?'}"
                    f" vectors for {len(batch)} texts"
                )
            for (d, _), v in zip(batch, vectors, strict=True):
                try:
                    unit = _unit(v, expect.dimension, f"the embedding of {d.ident}")
                except RequestError as e:
                    raise StoreError(f"embedder {expect.model_id}: {e.message}") from e
                parts.setdefault(id(d), []).append(unit)
        for d in todo:
            d.vector = pooled(parts[id(d)])
        changed: list[tuple[int, np.ndarray]] = []
        labels = [d.label for d in docs]

        def run(txn: lmdb.Transaction[bytes]) -> VectorState:
            # Run again from the start if the map had to grow: undo a failed attempt's effects.
            changed.clear()
            for d, label in zip(docs, labels, strict=True):
                d.label = label
            state = self._load_state(txn)
            if state.generation != expect.generation:
                raise _Abort
            for d in docs:
                if d.label is None:
                    raw = txn.get(d.ident.encode(), db=dbs["frame_ids"])
                    if raw is None:
                        d.label = state.next_frame
                        state.next_frame += 1
                        txn.put(d.ident.encode(), label_key(d.label), db=dbs["frame_ids"])
                    else:
                        d.label = key_label(raw)
                key = label_key(d.label)
                if txn.get(key, db=dbs["docs"]) is None:
                    state.documents += 1
                txn.put(key, d.record.encode(), db=dbs["docs"])
                if d.vector is not None and len(d.vector):
                    txn.put(key, d.vector.astype("<f4").tobytes(), db=dbs["vecs"])
                    changed.append((d.label, d.vector))
            advance(state)
            state.generation += 1
            self._save_state(txn, state)
            return state

        try:
            after = self._write(run)
        except _Abort:
            return False
        shared = self._shared
        with shared.mem_lock:
            if shared.memory is not None and shared.memory_generation == expect.generation:
                if changed:
                    shared.memory.put([c[0] for c in changed], np.stack([c[1] for c in changed]))
                shared.memory_generation = after.generation
            else:
                shared.set_memory(None, -1)
        return True

    # -- queries ---------------------------------------------------------------

    def _memory(self, state: VectorState) -> Neighbours:
        """The vectors in memory as of *state* (loaded, or reloaded after another writer)."""
        shared = self._env()
        # This process's writes move the memory along with the state; only a state newer
        # than the memory (another process wrote) makes it reload.
        if shared.memory is not None and shared.memory_generation >= state.generation:
            return shared.memory
        dim = state.dimension

        def load(txn: lmdb.Transaction[bytes]) -> tuple[VectorState, Neighbours]:
            current = self._load_state(txn)
            mem = Neighbours(dim)
            labels: list[int] = []
            rows: list[np.ndarray] = []
            for key, raw in txn.cursor(db=shared.dbs["vecs"]):
                labels.append(key_label(key))
                rows.append(np.frombuffer(raw, dtype="<f4"))
                if len(labels) >= 10_000:
                    mem.put(labels, np.stack(rows))
                    labels, rows = [], []
            if labels:
                mem.put(labels, np.stack(rows))
            return current, mem

        current, mem = self._read(load)
        shared.set_memory(mem, current.generation)
        return mem

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Load the vectors into memory and wait up to *timeout* seconds for the ANN graph.

        Above :data:`~storage.vectors.neighbours.EXACT_LIMIT` vectors searches
        go through an HNSW graph built in a background thread (exact scans
        meanwhile); this starts that build if needed and waits for it. True
        once searches need no more building (graph ready, few enough vectors
        for exact scans, or no usable index yet); False on timeout or if the
        build failed (searches stay exact; the next search tries again).
        ``OutOfRange`` for a negative or non-numeric *timeout*.
        """
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
            raise OutOfRange(f"timeout must be a number of seconds >= 0, not {timeout!r}")
        state = self.state()
        if not state.usable:
            return True
        shared = self._env()
        with shared.mem_lock:
            mem = self._memory(state)
            mem.start_graph()
        return mem.wait_ready(float(timeout))

    def search(
        self,
        vector: Any,
        *,
        limit: int = 10,
        since: float | None = None,
        until: float | None = None,
        kinds: Iterable[str] | str | None = None,
        lifecycle: Iterable[str] | str | None = None,
        id_prefix: str | None = None,
        trust: Iterable[str] | str | None = None,
        valid_at: float | str | None = None,
        model_id: str | None = None,
        backend: IntentSource | None = None,
    ) -> VectorResult:
        """The documents nearest *vector* (cosine), best first, passing the filters.

        The filters are the lexical search's (:func:`~storage.vectors.filters.make_filter`,
        same meanings and errors). *vector* must have the index's dimension
        (``bad_dimension``) and finite values (``bad_vector``). With *model_id*,
        an index holding another model's vectors answers no hits (it is being
        rebuilt). Snippets (the text's start) come from the context store.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise OutOfRange(f"limit must be between 1 and {MAX_LIMIT}, not {limit!r}")
        filt = make_filter(kinds, lifecycle, since, until, id_prefix, trust, valid_at)
        source = backend if backend is not None else self._backend
        state = self.state()
        lag = None if source is None else max(0, source.outbox_last() - state.applied)
        if not state.usable or (model_id is not None and model_id != state.model_id):
            return VectorResult((), state.model_id, 0, lag, building=True)
        query = _unit(vector, state.dimension, "the query vector")
        shared = self._env()
        with shared.mem_lock:
            mem = self._memory(state)
            ranked, approximate = self._nearest(mem, query, limit, filt)
        hits = self._hits(ranked, source)
        return VectorResult(
            tuple(hits),
            state.model_id,
            state.indexed_version,
            lag,
            building=state.syncing,
            approximate=approximate or mem.approximate,
        )

    def _nearest(
        self, mem: Neighbours, query: np.ndarray, limit: int, filt: VectorFilter
    ) -> tuple[list[tuple[float, DocRecord]], bool]:
        dbs = self._shared.dbs
        want = limit if filt.empty else 4 * limit

        def run(txn: lmdb.Transaction[bytes]) -> tuple[list[tuple[float, DocRecord]], bool]:
            nonlocal want
            while True:
                found = mem.search(query, want)
                out: list[tuple[float, DocRecord]] = []
                for label, score in found:
                    raw = txn.get(label_key(label), db=dbs["docs"])
                    if raw is None:
                        continue
                    rec = DocRecord.decode(raw)
                    if filt.accepts(rec):
                        out.append((score, rec))
                        if len(out) == limit:
                            return out, False
                if len(found) < want:
                    return out, False
                if want >= MAX_CANDIDATES:
                    return out, True
                want = min(MAX_CANDIDATES, want * 4)

        return self._read(run)

    def _hits(
        self, ranked: list[tuple[float, DocRecord]], source: IntentSource | None
    ) -> list[VectorHit]:
        texts: list[str] = [""] * len(ranked)
        if source is not None and ranked:

            def fetch(view: ReadView) -> list[str]:
                out = []
                for _, rec in ranked:
                    if rec.is_frame:
                        f = view.frame(rec.id)
                        out.append("" if f is None else frame_text(f))
                    else:
                        out.append(view.event_chunk(int(rec.id[2:]), 0, SNIPPET_CHARS * 4) or "")
                return out

            texts = source.read(fetch)
        return [
            VectorHit(
                id=rec.id,
                type="frame" if rec.is_frame else "event",
                kind=rec.kind,
                lifecycle=rec.lifecycle,
                score=score,
                time=rec.time,
                trust=rec.trust,
                snippet=_lead(text),
            )
            for (score, rec), text in zip(ranked, texts, strict=True)
        ]
