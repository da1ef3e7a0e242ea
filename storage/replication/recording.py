"""The primary's side: a :class:`~storage.backend.Backend` that records and ships every write.

:class:`ReplicatedStore` wraps the context's :class:`~storage.lmdb.LmdbStore`.
Its :meth:`~ReplicatedStore.transact` hands the callback a view that forwards
``apply`` and ``rewrite`` to the store's view and records them (encoded at
once, :func:`~storage.replication.codec.encode_op`); in the same LMDB
transaction it advances the store's replication record
(:mod:`storage.replication.fence`). After the local commit, the recorded
operations form one :class:`~storage.replication.codec.Batch` (one group
commit, one batch) that the *ship* callable delivers to the followers; only
when *ship* returns — the configured number of followers hold the batch
durably — does ``transact`` return, so an acknowledged commit is on
``1 + acks`` disks.

If *ship* fails, the batch stays pending and the error propagates (the
commit is durable here but not acknowledged); every later write ships the
pending batches first, in order, so a retry of the same transaction (its
client id makes it a duplicate) is answered only once its original is
replicated. A follower that answers ``stale_epoch`` means a newer primary
exists: this store is then *fenced* and refuses every later write with
``RequestError`` code ``fenced``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from protocol.errors import FENCED, STALE_EPOCH, MorphzError, RequestError
from protocol.forget import Rewrite
from protocol.view import Changeset, ReadView, WriteView
from storage.lmdb import LmdbStore
from storage.replication.codec import OutboxAck, encode_op, encode_parts, replication_key, seal
from storage.replication.fence import ReplicationState, ack_outbox, store_state, write_state

T = TypeVar("T")

Ship = Callable[[int, bytes], None]
"""``ship(seq, encoded batch)``: return once enough followers hold the batch durably."""


class _RecordingView:
    """A write view that forwards to the store's and records what it writes."""

    __slots__ = ("_w", "_ops")

    def __init__(self, inner: WriteView, ops: list[bytes]) -> None:
        self._w = inner
        self._ops = ops

    def apply(self, changes: Changeset) -> None:
        self._w.apply(changes)
        self._ops.append(encode_op(changes))

    def rewrite(self, rw: Rewrite) -> None:
        self._w.rewrite(rw)  # type: ignore[attr-defined]
        self._ops.append(encode_op(rw))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)


class ReplicatedStore:
    """The store of a replicated context's primary under *epoch*; every write shipped by *ship*.

    Opening refuses a store that has seen a newer epoch (``RequestError``
    ``stale_epoch``) and raises an older one's fence to *epoch* durably.
    Writes are serialized here (a write and its shipping hold one lock), so
    batches reach *ship* in sequence order with no gap.
    """

    def __init__(
        self, inner: LmdbStore, *, epoch: int, ship: Ship, key: bytes | None = None
    ) -> None:
        state = store_state(inner)
        if state.epoch > epoch:
            raise RequestError(
                f"context store {inner.path} has seen epoch {state.epoch}, newer than {epoch}",
                code=STALE_EPOCH,
            )
        if state.epoch < epoch:
            state = ReplicationState(epoch, state.seq, state.version)
            raised = state
            inner.transact(lambda v: write_state(v, raised))
        self._inner = inner
        self._ship = ship
        # Batches are sealed under the context's replication key (named by the store's
        # directory, the context's name) unless one is given.
        self._key = key if key is not None else replication_key(os.path.basename(inner.path))
        self._state = state
        self._acked = state.seq
        self._pending: list[tuple[int, list[bytes], int]] = []
        self._lock: Any = threading.RLock()
        self._fenced: RequestError | None = None
        self.confirm: Callable[[int], None] | None = None
        """Called with the new watermark after each acknowledged write (tells followers)."""

    # -- what replication adds --------------------------------------------------

    @property
    def inner(self) -> LmdbStore:
        """The wrapped store."""
        return self._inner

    @property
    def state(self) -> ReplicationState:
        """Epoch, last replicated write and its version, as committed here."""
        return self._state

    @property
    def acked(self) -> int:
        """The last replicated write acknowledged (held by enough followers)."""
        return self._acked

    @property
    def fenced(self) -> bool:
        """True once a follower refused this primary's epoch: it writes no more."""
        return self._fenced is not None

    @property
    def fenced_error(self) -> RequestError | None:
        """The ``fenced`` error every call of a replaced primary answers, once fenced."""
        return self._fenced

    def fence(self, why: str) -> None:
        """Refuse every later write (a newer primary exists)."""
        self._fenced = RequestError(why, code=FENCED)

    def exclusive(self) -> Any:
        """The lock every write holds: hold it to keep writes out (a snapshot)."""
        return self._lock

    def flush(self) -> None:
        """Ship the batches committed here and not acknowledged yet, in order."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        while self._pending:
            seq, ops, version = self._pending[0]
            data = seal(encode_parts(self._state.epoch, seq, version, self._acked, ops), self._key)
            try:
                self._ship(seq, data)
            except MorphzError as e:
                if e.code == STALE_EPOCH:
                    self.fence(
                        f"context store {self._inner.path} was primary under epoch "
                        f"{self._state.epoch}; a newer primary exists: {e.message}"
                    )
                    raise self._fenced from e  # type: ignore[misc]
                raise
            self._pending.pop(0)
            self._acked = seq
            if self.confirm is not None:
                self.confirm(seq)

    def _write(self, fn: Callable[[WriteView, list[bytes]], T]) -> T:
        with self._lock:
            if self._fenced is not None:
                raise self._fenced
            self._flush()
            ops: list[bytes] = []
            after: list[ReplicationState] = []

            def run(view: WriteView) -> T:
                ops.clear()
                after.clear()
                result = fn(view, ops)
                if ops:
                    state = ReplicationState(
                        self._state.epoch, self._state.seq + 1, view.meta().version
                    )
                    write_state(view, state)
                    after.append(state)
                return result

            result = self._inner.transact(run)
            if after:
                self._state = after[0]
                self._pending.append((after[0].seq, list(ops), after[0].version))
                self._flush()
            return result

    # -- the Backend protocol ----------------------------------------------------

    @property
    def readonly(self) -> bool:
        return self._inner.readonly

    @property
    def path(self) -> str:
        """The directory of the wrapped store."""
        return self._inner.path

    def read(self, fn: Callable[[ReadView], T]) -> T:
        return self._inner.read(fn)

    def transact(self, fn: Callable[[WriteView], T]) -> T:
        """Run *fn* in one write of the store; return once the write is replicated."""
        return self._write(lambda view, ops: fn(_RecordingView(view, ops)))

    def has_meta(self) -> bool:
        return self._inner.has_meta()

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        return self._inner.outbox_read(after, limit)

    def outbox_ack(self, upto: int) -> None:
        def run(view: WriteView, ops: list[bytes]) -> None:
            ack_outbox(view, upto)
            ops.append(encode_op(OutboxAck(upto)))

        self._write(run)

    def outbox_last(self) -> int:
        return self._inner.outbox_last()

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        return self._inner.audit_read(after, limit)

    def audit_newest(self, before: int | None, limit: int) -> list[tuple[int, dict[str, Any]]]:
        return self._inner.audit_newest(before, limit)

    def close(self) -> None:
        self._inner.close()

    def __repr__(self) -> str:
        return f"ReplicatedStore({self._inner!r}, epoch={self._state.epoch})"
