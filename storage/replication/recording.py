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

import hmac
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from protocol.errors import FENCED, STALE_EPOCH, MorphzError, RequestError, WireError
from protocol.forget import Rewrite
from protocol.view import Changeset, ReadView, WriteView
from storage.lmdb import LmdbStore
from storage.replication.codec import (
    SEALED,
    OutboxAck,
    batch_mac,
    encode_op,
    encode_parts,
    opened,
    replication_key,
    unseal,
)
from storage.replication.fence import (
    ReplicationState,
    ack_outbox,
    hold,
    kept,
    kept_range,
    prune,
    store_state,
    write_state,
    written_last,
)

T = TypeVar("T")

DEFAULT_RETAIN = 4096
"""Batches a replicated store keeps by default for followers to catch up from."""
MAX_RETAIN = 1 << 20
RETAIN_SETTING = "replication_log"
"""The key of the retained log's length in the context's settings (its meta)."""


def retain_of(settings: object) -> int:
    """The retained log's length a context's settings record (``replication_log``), else
    :data:`DEFAULT_RETAIN`."""
    value = settings.get(RETAIN_SETTING) if isinstance(settings, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RETAIN:
        return value
    return DEFAULT_RETAIN


def check_retain(value: object) -> int:
    """*value* as a retained-log length (0 to :data:`MAX_RETAIN`), else ``bad_argument``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_RETAIN:
        raise RequestError(
            f"the retained log is 0 to {MAX_RETAIN} batches, not {value!r}", code="bad_argument"
        )
    return value


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

    Opening a store whose last write was not its replication record's starts a
    new chain: the store was written outside any batch meanwhile (a restart that
    records changed settings before it replicates), so the retained log is
    dropped and the chain's digest is replaced by a fresh one. No follower can
    then be caught up from batches that skip such a write: each one gets a
    snapshot first (what the primary does on open, :attr:`continued` False), and
    the log serves the gaps that open after it. A store written only by batches,
    fences and catch-ups (a promoted follower, a restart that wrote nothing) keeps
    its chain and its log (:attr:`continued`).
    """

    def __init__(
        self,
        inner: LmdbStore,
        *,
        epoch: int,
        ship: Ship,
        key: bytes | None = None,
        retain: int = DEFAULT_RETAIN,
    ) -> None:
        state = store_state(inner)
        if state.epoch > epoch:
            raise RequestError(
                f"context store {inner.path} has seen epoch {state.epoch}, newer than {epoch}",
                code=STALE_EPOCH,
            )
        self._key = key if key is not None else replication_key(os.path.basename(inner.path))
        self.continued = inner.has_meta() and state.seq > 0 and written_last(inner)
        """True if the store's data is exactly what its chain of batches made it (its last
        write was a batch, a fence or a follower's catch-up: a promoted follower, a
        restart that wrote nothing): the chain and the retained log go on, so followers
        holding a prefix of it are caught up from the log. False: a new chain (below)."""
        if inner.has_meta() or state.epoch < epoch:
            seed = b"morphz-replication-open\0" + state.digest + os.urandom(16)
            fresh = hmac.new(self._key, seed, "sha256").digest()
            new_chain = inner.has_meta() and not self.continued
            state = state.at(epoch=epoch, digest=fresh if new_chain else state.digest)
            opened_at = state

            def reopen(view: WriteView) -> None:
                write_state(view, opened_at)
                if new_chain:
                    prune(view, opened_at.seq + 1)

            inner.transact(reopen)
        self._inner = inner
        self._ship = ship
        self._state = state
        self._acked = state.seq
        self.retain = check_retain(retain)
        """How many of the last batches the store keeps for followers to catch up from."""
        self._pending: list[tuple[int, bytes]] = []
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
            seq, data = self._pending[0]
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
            after: list[tuple[ReplicationState, bytes]] = []

            def run(view: WriteView) -> T:
                ops.clear()
                after.clear()
                result = fn(view, ops)
                if ops:
                    # The batch is sealed here, chained to the one before (no batch is
                    # pending: the flush above shipped them all, so ``acked`` is the last).
                    seq, version = self._state.seq + 1, view.meta().version
                    data = encode_parts(self._state.epoch, seq, version, self._acked, ops)
                    mac = batch_mac(self._key, data, self._state.digest)
                    sealed = bytes([SEALED]) + mac + data
                    state = ReplicationState(self._state.epoch, seq, version, mac)
                    write_state(view, state)
                    hold(view, seq, sealed)  # the retained log
                    if seq > self.retain:
                        prune(view, seq - self.retain + 1)
                    after.append((state, sealed))
                return result

            result = self._inner.transact(run)
            if after:
                self._state, sealed = after[0]
                self._pending.append((self._state.seq, sealed))
                self._flush()
            return result

    def tail(self, after: int, head: bytes) -> list[bytes] | None:
        """The sealed batches after batch *after* up to the last one written, from the
        retained log, for a follower that holds batch *after* with MAC *head* (or, for the
        batch just before the log's first, whose MAC that first batch is chained to: a
        follower holding a snapshot taken then). None when the log no longer reaches back
        there, or the follower's history is not a prefix of this store's (its *head* is not
        this store's batch *after*; a follower holding nothing has the chain's start, which
        no store that holds data chains on): it needs a snapshot."""
        state = self._state
        if not 0 <= after <= state.seq:
            return None
        batches = self._inner.read(lambda v: kept(v, max(after, 1), state.seq))
        by_seq = dict(batches)
        if after == state.seq:
            mine = state.digest
        elif after in by_seq:
            mine = opened(by_seq[after])[0]
        elif after + 1 in by_seq:  # the log starts right after it (a snapshot taken then)
            try:  # the follower's head is what batch after + 1 was chained to
                unseal(by_seq[after + 1], self._key, bytes(head))
            except WireError:
                return None
            mine = bytes(head)
        else:
            return None
        if not hmac.compare_digest(mine, bytes(head)):
            return None
        out = [data for seq, data in batches if seq > after]
        if len(out) != state.seq - after:
            return None
        return out

    def retained(self) -> tuple[int, int] | None:
        """``(oldest, newest)`` batch numbers of the retained log, None if it is empty."""
        return self._inner.read(kept_range)

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
