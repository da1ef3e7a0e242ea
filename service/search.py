"""Search for a context: its lexical index kept current, and a model's search recorded.

:class:`Searcher` owns the index of one context (``storage.search``) and how it
is kept current: either caught up synchronously before a search (the embedded
default: a search sees everything committed before it), or by an index worker
thread (:meth:`Searcher.start_worker`) that a server starts so that indexing
never runs on its store thread; then a search waits for the worker, at most
a given number of seconds, and reports what it could not wait for as ``lag``.

A model's search (:func:`storage.search.tool.model_search`: its arguments
checked, governance applied) is recorded as a ``recall_result`` observation
naming the frames it found, like a recall (:meth:`Searcher.search`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from storage.search import IndexWorker, LexicalIndex, model_search, search_text

if TYPE_CHECKING:
    from service.context import Context

SEARCH_CATCH_UP = 2.0
"""Seconds a search waits for the index worker to reflect what was committed before it."""


class Searcher:
    """The lexical index of one context and its upkeep; see the module docstring.

    *index* is an index opened by the caller (kept open by :meth:`close`); by
    default the index beside the context's store is opened at first use.
    """

    def __init__(self, backend: Any, index: LexicalIndex | None = None) -> None:
        self._backend = backend
        self._index = index
        self._owns_index = index is None
        self._worker: IndexWorker | None = None
        self._lock = threading.Lock()  # opening is the one step two threads may race

    @property
    def index(self) -> LexicalIndex:
        """The index, opened on first use (a :class:`~protocol.errors.StoreError` when the
        context is not stored in a directory)."""
        with self._lock:
            if self._index is None:
                self._index = LexicalIndex.for_backend(self._backend)
            return self._index

    def start_worker(self) -> IndexWorker:
        """Keep the index current from a worker thread from now on (idempotent)."""
        index = self.index
        with self._lock:
            if self._worker is None:
                self._worker = IndexWorker(index)
            return self._worker

    def catch_up(self, timeout: float = SEARCH_CATCH_UP) -> bool:
        """Bring the index up to what was committed before this call.

        With a worker, wait for it at most *timeout* seconds (False when it did
        not get there); without one, apply every pending update here.
        """
        worker = self._worker
        if worker is not None:
            return worker.wait_for(None, timeout)
        self.index.catch_up(self._backend)
        return True

    def search(self, ctx: Context, args: dict[str, Any], session: str = "main") -> dict[str, Any]:
        """Run a model's search on the index as it stands, recorded as a ``recall_result``.

        Answers ``{"ref", "hits", "recalled", "lag"}``: the observation's
        reference, the number of hits, the ids of the frames found, and how many
        committed updates the index had not applied yet.
        """
        result = model_search(self.index, args)
        frames = [h.id for h in result.hits if h.type == "frame"]
        e = ctx.observe_retrieval(search_text(result), frames, session=session)
        return {"ref": e.ref, "hits": len(result.hits), "recalled": frames, "lag": result.lag}

    def close(self) -> None:
        """Stop the worker, and close the index if this searcher opened it. Idempotent."""
        with self._lock:
            worker, self._worker = self._worker, None
            index = self._index if self._owns_index else None
            if self._owns_index:
                self._index = None
        if worker is not None:
            worker.stop()
        if index is not None:
            index.close()
