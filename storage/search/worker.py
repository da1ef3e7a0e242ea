"""The background thread that keeps a lexical index up to date from the context's outbox."""

from __future__ import annotations

import threading
import time

from protocol.errors import OutOfRange
from storage.search.documents import IntentSource
from storage.search.index import DEFAULT_BATCH, LexicalIndex


class IndexWorker:
    """A background thread that keeps a :class:`LexicalIndex` up to date (embedded use).

    It applies intents in batches of *batch*, polling the outbox every *poll*
    seconds when idle (:meth:`notify` wakes it at once, e.g. after a commit).
    :meth:`wait_for` blocks until the index has caught up. An error in a batch
    is kept in :attr:`error` and retried after a pause; it never kills the thread.
    Stop the worker before closing the index or the context.
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
        if batch < 1:
            raise OutOfRange(f"batch must be at least 1, not {batch}")
        if not 0 < poll <= 60:
            raise OutOfRange(f"poll must be between 0 and 60 seconds, not {poll}")
        self.index = index
        self.backend = index._source(backend)
        self.batch = batch
        self.poll = poll
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._wake = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="morphz-index", daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Start the thread (done by the constructor unless ``start=False``)."""
        if not self._thread.is_alive():
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
            try:
                n = self.index.apply_intents(self.backend, self.batch)
                self.error = None
            except Exception as e:  # noqa: BLE001 - kept for the owner; the worker goes on
                self.error = e
                n = 0
            with self._cond:
                self._cond.notify_all()
                if n == 0 and not self._stop:
                    if not self._wake:
                        self._cond.wait(self.poll if self.error is None else self.poll * 10)
                    self._wake = False

    def notify(self) -> None:
        """Wake the worker now (there are new intents)."""
        with self._cond:
            self._wake = True
            self._cond.notify_all()

    def wait_for(self, version: int | None = None, timeout: float = 5.0) -> bool:
        """Block until everything written before this call is indexed; False on timeout.

        With *version*, also wait until the index reflects that context version.
        """
        target = self.backend.outbox_last()
        deadline = time.monotonic() + timeout
        while True:
            state = self.index.state()
            if (
                state.usable
                and state.applied >= target
                and (version is None or state.indexed_version >= version)
            ):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self._thread.is_alive():
                return False
            with self._cond:
                self._wake = True
                self._cond.notify_all()
                self._cond.wait(min(left, self.poll))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after its current batch."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> IndexWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
