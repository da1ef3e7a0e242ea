"""The follower's side: receive batches in order, hold them durably, apply what is acknowledged.

:class:`Follower` keeps one context's :class:`~storage.lmdb.LmdbStore` (the
same layout as the primary's) in step with the primary's batches:

* :meth:`Follower.receive` accepts batch ``held + 1`` only. An older epoch
  than the store's fence is refused (``RequestError`` ``stale_epoch``: that
  primary has been replaced); a newer one means a new primary this follower
  was never brought to by a snapshot (``replica_gap``: its history may have
  diverged, e.g. it kept receiving a deposed primary's batches while cut off
  from the fence); a batch past the next one is a gap
  (``RequestError`` ``replica_gap``: the follower needs catching up); a batch
  it holds already is acknowledged again and changes nothing (a retried ship).
  An accepted batch is written durably (fsync) *before* the call returns —
  that return is the acknowledgement the primary counts.
* A received batch is *held* (kept in the store, not applied) until the
  primary has acknowledged it to its client; the watermark comes with every
  batch and with :meth:`Follower.confirm`. Only then is it applied, so a
  read of the follower's store never shows a commit the primary has not
  acknowledged.
* :meth:`Follower.drain` applies every held batch (on promotion: a commit
  held here may have been acknowledged by the lost primary).
* :meth:`Follower.fence` raises the epoch so the old primary's batches are refused.

Snapshots (:func:`snapshot` on the primary, :func:`install` on the follower)
replace a follower's store whole: how a new follower starts and how an old
primary that holds commits the new primary never had rejoins.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from protocol.errors import REPLICA_GAP, STALE_EPOCH, RequestError, StoreError
from protocol.forget import Rewrite
from protocol.view import Changeset, WriteView
from storage.layout import DIR_MODE, replace_durably
from storage.lmdb import LmdbStore
from storage.replication.codec import (
    OutboxAck,
    batch_header,
    decode_batch,
    replication_key,
    unseal,
)
from storage.replication.fence import (
    ReplicationState,
    ack_outbox,
    held,
    hold,
    read_state,
    release,
    store_state,
    write_state,
)

DATA_FILE = "data.mdb"


class Follower:
    """Applies one primary's batches to *store* in order, under the epoch fence."""

    def __init__(self, store: LmdbStore, *, key: bytes | None = None) -> None:
        self._store = store
        self._key = key if key is not None else replication_key(os.path.basename(store.path))
        self._state = store_state(store)
        self._held = self._state.seq
        pending = store.read(held)
        if pending:
            self._held = pending[-1][0]

    @property
    def store(self) -> LmdbStore:
        """The follower's store (reads show only applied batches)."""
        return self._store

    @property
    def state(self) -> ReplicationState:
        """Epoch fence, last applied batch and the context version after it."""
        return self._state

    @property
    def held_seq(self) -> int:
        """The last batch held durably (applied or not): what the follower acknowledges."""
        return self._held

    def receive(self, data: bytes) -> int:
        """Hold batch *data* durably and apply what is acknowledged; the held sequence number.

        *data* is a sealed batch (:func:`~storage.replication.codec.unseal`): one whose MAC
        does not check out under the replication key is WireError ``bad_mac``, nothing held."""
        data = unseal(data, self._key)
        epoch, seq, _version, acked = batch_header(data)
        if epoch < self._state.epoch:
            raise RequestError(
                f"batch {seq} comes from epoch {epoch}, older than this follower's "
                f"{self._state.epoch}",
                code=STALE_EPOCH,
            )
        if epoch > self._state.epoch:
            # A primary this follower was never brought to (by a snapshot, which also
            # sets the fence): what it holds may not be a prefix of that primary's history.
            raise RequestError(
                f"batch {seq} comes from epoch {epoch}, newer than this follower's "
                f"{self._state.epoch}: the follower needs a snapshot",
                code=REPLICA_GAP,
            )
        if seq <= self._held:
            self.confirm(acked)
            return self._held
        if seq != self._held + 1:
            raise RequestError(
                f"batch {seq} arrived after batch {self._held}: the follower needs catching up",
                code=REPLICA_GAP,
            )
        decode_batch(data)  # refuse a malformed batch before holding it
        fence = ReplicationState(epoch, self._state.seq, self._state.version)

        def run(view: WriteView) -> None:
            hold(view, seq, data)
            write_state(view, fence)
            self._apply_held(view, acked)

        self._store.transact(run)
        self._held = seq
        self._state = self._store.read(read_state)
        return self._held

    def confirm(self, acked: int) -> ReplicationState:
        """Apply the held batches numbered *acked* and below (the primary acknowledged them)."""
        if acked > self._state.seq and self._held > self._state.seq:
            self._store.transact(lambda v: self._apply_held(v, acked))
            self._state = self._store.read(read_state)
        return self._state

    def drain(self) -> ReplicationState:
        """Apply every held batch (on promotion); the state after."""
        return self.confirm(self._held)

    def fence(self, epoch: int) -> ReplicationState:
        """Refuse batches of epochs older than *epoch* from now on (durably)."""
        if epoch > self._state.epoch:
            state = ReplicationState(epoch, self._state.seq, self._state.version)
            self._store.transact(lambda v: write_state(v, state))
            self._state = state
        return self._state

    def _apply_held(self, view: WriteView, acked: int) -> None:
        state = read_state(view)
        for seq, data in held(view):
            if seq > acked:
                break
            if seq != state.seq + 1:
                raise StoreError(f"held batch {seq} does not follow applied batch {state.seq}")
            batch = decode_batch(data)
            for op in batch.ops:
                if isinstance(op, Changeset):
                    view.apply(op)
                elif isinstance(op, Rewrite):
                    view.rewrite(op)  # type: ignore[attr-defined]
                elif isinstance(op, OutboxAck):
                    ack_outbox(view, op.upto)
            release(view, seq)
            state = ReplicationState(max(state.epoch, batch.epoch), seq, batch.version)
            write_state(view, state)


def snapshot(store: LmdbStore) -> tuple[bytes, ReplicationState]:
    """A compact copy of *store*'s data file and the replication record it holds.

    Taken inside one read transaction, so the copy and the record agree; call
    it where no write of the store can start meanwhile to have it current.
    """
    scratch = tempfile.mkdtemp(prefix=".snapshot-", dir=store.path)
    try:
        state = store.copy_to(scratch, read_state)
        with open(os.path.join(scratch, DATA_FILE), "rb") as f:
            return f.read(), state
    except OSError as e:
        raise StoreError(f"cannot snapshot the context store {store.path}: {e}") from e
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def install(path: str, data: bytes) -> None:
    """Replace the store at *path* (closed everywhere in this process) by snapshot *data*.

    The snapshot is written beside it, synced, then renamed over ``data.mdb``;
    the search index beside the store is dropped (rebuilt from the new data on
    first search).
    """
    try:
        os.makedirs(path, DIR_MODE, exist_ok=True)
        lock = os.path.join(path, "lock.mdb")
        if os.path.exists(lock):
            os.unlink(lock)
        fd, tmp = tempfile.mkstemp(prefix=".install-", dir=path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            replace_durably(tmp, os.path.join(path, DATA_FILE))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise StoreError(f"cannot install a snapshot at {path}: {e}") from e
    from storage.search.format import INDEX_DIR

    shutil.rmtree(os.path.join(path, INDEX_DIR), ignore_errors=True)
