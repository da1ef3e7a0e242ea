"""The background thread that embeds what the outbox names into the vector index."""

from __future__ import annotations

from storage.derived import IntentSource, OutboxWorker
from storage.embeddings import Embedder
from storage.vectors.index import DEFAULT_BATCH, VectorIndex

MAX_PAUSE = 30.0
"""Longest pause between retries after failing batches (the embedder is down)."""


class VectorWorker(OutboxWorker):
    """A thread that keeps a :class:`VectorIndex` current with *embedder* (embedded use).

    Like :class:`storage.search.IndexWorker` (both are a
    :class:`storage.derived.OutboxWorker`): it applies intents in batches,
    polls every *poll* seconds when idle (:meth:`notify` wakes it), and
    :meth:`wait_for` blocks until what was written before the call is embedded.
    A failing batch (the embedding endpoint down, a wrong dimension) is kept in
    :attr:`error` and retried after a pause that doubles up to
    :data:`MAX_PAUSE`; it never kills the thread, and commits never wait for it.
    """

    def __init__(
        self,
        index: VectorIndex,
        embedder: Embedder,
        backend: IntentSource | None = None,
        *,
        batch: int = DEFAULT_BATCH,
        poll: float = 0.05,
        start: bool = True,
    ) -> None:
        self.index = index
        self.embedder = embedder
        super().__init__(
            index._source(backend),
            batch=batch,
            poll=poll,
            max_pause=MAX_PAUSE,
            name="morphz-vectors",
            start=start,
        )

    def _step(self) -> int:
        return self.index.apply_intents(self.embedder, self.backend, self.batch)

    def _caught_up(self, target: int, version: int | None) -> bool:
        state = self.index.state()
        return (
            state.usable
            and not state.syncing
            and state.applied >= target
            and (version is None or state.indexed_version >= version)
        )
