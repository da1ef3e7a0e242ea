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

import hmac
import os
import shutil
import tempfile

from protocol.errors import REPLICA_GAP, STALE_EPOCH, RequestError, StoreError, WireError
from protocol.forget import Rewrite
from protocol.view import Changeset, ReadView, WriteView
from storage.layout import DIR_MODE, replace_durably
from storage.lmdb import LmdbStore
from storage.replication.codec import (
    Batch,
    OutboxAck,
    batch_header,
    check_control,
    decode_batch,
    opened,
    replication_key,
    unseal,
)
from storage.replication.fence import (
    ReplicationState,
    ack_outbox,
    held,
    hold,
    holds_copy,
    kept,
    mark_copy,
    prune,
    read_state,
    store_state,
    write_state,
)
from storage.replication.recording import retain_of

DATA_FILE = "data.mdb"


class Follower:
    """Applies one primary's batches to *store* in order, under the epoch fence."""

    def __init__(self, store: LmdbStore, *, key: bytes | None = None) -> None:
        self._store = store
        self._key = key if key is not None else replication_key(os.path.basename(store.path))
        self._state = store_state(store)
        self._copy = store.read(holds_copy)
        self._held = self._state.seq
        self._head = self._state.digest
        pending = store.read(held)
        if pending:
            self._held = pending[-1][0]
            self._head = opened(pending[-1][1])[0]

    @property
    def store(self) -> LmdbStore:
        """The follower's store (reads show only applied batches)."""
        return self._store

    @property
    def key(self) -> bytes:
        """The context's replication key (what every message to this follower is MACed with)."""
        return self._key

    @property
    def state(self) -> ReplicationState:
        """Epoch fence, last applied batch and the context version after it."""
        return self._state

    @property
    def held_seq(self) -> int:
        """The last batch held durably (applied or not): what the follower acknowledges."""
        return self._held

    @property
    def holds_copy(self) -> bool:
        """Whether this store holds a copy of the primary's data: a snapshot installed, or
        a batch or catch-up held (a new store, or a sealed one, does not: its reads would
        show what no primary acknowledged, or nothing at all)."""
        return self._copy

    def installed(self, epoch: int) -> ReplicationState:
        """After a snapshot was installed over this store: fence at *epoch* and record that
        it holds a copy, in one durable write."""
        return self._fence(epoch, copy=True)

    def sealed(self, epoch: int) -> ReplicationState:
        """Before this store opens as the primary's: fence at *epoch* and record that it no
        longer holds a follower's copy (the primary writes outside batches; deposed, it
        must not be read as a copy), in one durable write that is the store's last (so the
        promoted primary goes on with the chain: ``written_last``)."""
        return self._fence(epoch, copy=False)

    def _fence(self, epoch: int, *, copy: bool) -> ReplicationState:
        """Fence at *epoch* (never lower) and set or clear the copy marker, in one write."""
        state = self._state.at(epoch=max(epoch, self._state.epoch))

        def run(view: WriteView) -> None:
            write_state(view, state)
            mark_copy(view, copy)

        self._store.transact(run)
        self._state, self._copy = state, copy
        return state

    @property
    def head(self) -> bytes:
        """The MAC of the last batch held: the next batch's MAC must be chained to it."""
        return self._head

    def _check_epoch(self, epoch: int, seq: int) -> None:
        if epoch < self._state.epoch:
            raise RequestError(
                f"batch {seq} comes from epoch {epoch}, older than this follower's "
                f"{self._state.epoch}",
                code=STALE_EPOCH,
            )
        if epoch > self._state.epoch:
            # A primary this follower was never brought to (by a snapshot or a catch-up,
            # which also set the fence): what it holds may not be a prefix of its history.
            raise RequestError(
                f"batch {seq} comes from epoch {epoch}, newer than this follower's "
                f"{self._state.epoch}: the follower needs catching up",
                code=REPLICA_GAP,
            )

    def receive(self, data: bytes) -> int:
        """Hold batch *data* durably and apply what is acknowledged; the held sequence number.

        *data* is a sealed batch (:func:`~storage.replication.codec.unseal`) whose MAC must
        check out chained to the last batch held: a batch forged without the key, or one
        of another history, replayed out of order, is WireError ``bad_mac``, nothing held.
        A batch held already is acknowledged again only if it is the very batch held."""
        _, body = opened(data)
        try:
            epoch, seq, _version, acked = batch_header(body)
        except WireError as e:  # nothing a holder of the key sealed
            raise WireError(f"not a sealed batch: {e.message}", code="bad_mac") from e
        self._check_epoch(epoch, seq)
        if seq <= self._held:
            if seq > self._state.seq:  # held, not applied: the same bytes may confirm
                stored = self._store.read(lambda v: kept(v, seq, seq))
                if not stored or not hmac.compare_digest(stored[0][1], bytes(data)):
                    raise WireError(
                        f"batch {seq} is not the batch held under that number", code="bad_mac"
                    )
                self.confirm(acked)
            return self._held
        if seq != self._held + 1:
            raise RequestError(
                f"batch {seq} arrived after batch {self._held}: the follower needs catching up",
                code=REPLICA_GAP,
            )
        unseal(data, self._key, self._head)
        batch = decode_batch(body)  # refuse a malformed batch before holding it
        self._hold([(seq, bytes(data))], epoch, acked, {seq: batch})
        return self._held

    def catch_up(self, epoch: int, acked: int, batches: list[bytes], mac: bytes) -> int:
        """Hold the primary's sealed *batches* (the ones after :attr:`held_seq`, from its
        retained log) in one durable write, fence at *epoch*, apply up to *acked*; the held
        sequence number.

        The message's MAC covers *epoch*, *acked* and the last batch's MAC; each batch's
        MAC must check out chained to the one before, starting from :attr:`head`, so only
        the continuation of this follower's own history is taken (batches of earlier
        epochs included: the chain proves them). Anything else — a forged message, a
        batch out of order or of another history — is WireError ``bad_mac`` and holds
        nothing; an older *epoch* than the fence is ``stale_epoch``."""
        if not isinstance(batches, list) or not batches:
            raise WireError("a catch-up carries a list of sealed batches", code="bad_argument")
        last_mac = opened(batches[-1])[0]
        check_control(self._key, mac, "catch_up", epoch, acked, last_mac)
        if epoch < self._state.epoch:
            raise RequestError(
                f"a catch-up from epoch {epoch} is older than this follower's {self._state.epoch}",
                code=STALE_EPOCH,
            )
        head, seq, rows, decoded = self._head, self._held, [], {}
        for data in batches:
            body = unseal(data, self._key, head)
            b_epoch, b_seq, _version, _acked = batch_header(body)
            if b_seq != seq + 1 or b_epoch > epoch:
                raise WireError(
                    f"catch-up batch {b_seq} does not follow batch {seq}", code="bad_mac"
                )
            decoded[b_seq] = decode_batch(body)
            head, seq = opened(data)[0], b_seq
            rows.append((b_seq, bytes(data)))
        self._hold(rows, epoch, acked, decoded)
        return self._held

    def _hold(
        self, rows: list[tuple[int, bytes]], epoch: int, acked: int, decoded: dict[int, Batch]
    ) -> None:
        fence = self._state.at(epoch=max(epoch, self._state.epoch))

        def run(view: WriteView) -> None:
            for seq, data in rows:
                hold(view, seq, data)
            write_state(view, fence)
            if not self._copy:
                mark_copy(view, True)
            self._apply_held(view, acked, decoded)

        self._store.transact(run)
        self._held = rows[-1][0]
        self._head = opened(rows[-1][1])[0]
        self._state = self._store.read(read_state)
        self._copy = True

    def confirm(self, acked: int) -> ReplicationState:
        """Apply the held batches numbered *acked* and below (the primary acknowledged them)."""
        if acked > self._state.seq and self._held > self._state.seq:
            self._store.transact(lambda v: self._apply_held(v, acked))
            self._state = self._store.read(read_state)
        return self._state

    def confirm_signed(self, epoch: int, acked: int, mac: bytes) -> ReplicationState:
        """:meth:`confirm` for a message from the primary of *epoch*: its MAC must check
        out (``bad_mac``) and *epoch* be this follower's fence (else nothing is applied:
        an older primary's watermark counts for none of the batches held now)."""
        check_control(self._key, mac, "confirm", epoch, acked)
        if epoch != self._state.epoch:
            raise RequestError(
                f"a watermark from epoch {epoch} at a follower of epoch {self._state.epoch}",
                code=STALE_EPOCH if epoch < self._state.epoch else REPLICA_GAP,
            )
        return self.confirm(acked)

    def drain(self) -> ReplicationState:
        """Apply every held batch (on promotion); the state after."""
        return self.confirm(self._held)

    def fence(self, epoch: int) -> ReplicationState:
        """Refuse batches of epochs older than *epoch* from now on (durably)."""
        if epoch > self._state.epoch:
            state = self._state.at(epoch=epoch)
            self._store.transact(lambda v: write_state(v, state))
            self._state = state
        return self._state

    def _apply_held(
        self, view: WriteView, acked: int, decoded: dict[int, Batch] | None = None
    ) -> None:
        state = start = read_state(view)
        for seq, data in held(view):
            if seq > acked:
                break
            if seq != state.seq + 1:
                raise StoreError(f"held batch {seq} does not follow applied batch {state.seq}")
            mac, body = opened(data)
            batch = decoded.get(seq) if decoded else None
            if batch is None:
                batch = decode_batch(body)
            for op in batch.ops:
                if isinstance(op, Changeset):
                    view.apply(op)
                elif isinstance(op, Rewrite):
                    view.rewrite(op)  # type: ignore[attr-defined]
                elif isinstance(op, OutboxAck):
                    ack_outbox(view, op.upto)
            state = ReplicationState(max(state.epoch, batch.epoch), seq, batch.version, mac)
            write_state(view, state)
        if state.seq > start.seq:
            retain = retained_length(view)
            if state.seq > retain:
                prune(view, state.seq - retain + 1)


def retained_length(view: ReadView) -> int:
    """The retained log's length the context records in its settings
    (:func:`~storage.replication.recording.retain_of`)."""
    return retain_of(view.meta().settings)


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
