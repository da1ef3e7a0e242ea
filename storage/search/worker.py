"""The background thread that keeps a lexical index up to date from the context's outbox."""

from __future__ import annotations

from storage.derived import IntentSource, OutboxWorker
from storage.search.index import DEFAULT_BATCH, LexicalIndex


class IndexWorker(OutboxWorker):
    """A background thread that keeps a :class:`LexicalIndex` up to date (embedded use).

    It applies intents in batches of *batch*, polling the outbox every *poll*
    seconds when idle (:meth:`notify` wakes it at once, e.g. after a commit).
    :meth:`wait_for` blocks until the index has caught up. An error in a batch
    is kept in :attr:`error` and retried after ``10 * poll``; it never kills
    the thread (:class:`storage.derived.OutboxWorker`). Stop the worker before
    closing the index or the context.
    """

    def __init__(
        self,
        index: LexicalIndex,
        backend: IntentSource | None = None,
        *,
        batch: int = DEFAULT_BATCH,
        poll: float = 0.05,
        start: bool = True,
    ) -> None:
        self.index = index
        super().__init__(
            index._source(backend),
            batch=batch,
            poll=poll,
            max_pause=poll * 10,
            name="morphz-index",
            start=start,
        )

    def _step(self) -> int:
        return self.index.apply_intents(self.backend, self.batch)

    def _caught_up(self, target: int, version: int | None) -> bool:
        state = self.index.state()
        return (
            state.usable
            and state.applied >= target
            and (version is None or state.indexed_version >= version)
        )
