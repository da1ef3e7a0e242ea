"""The replication record every replicated store keeps, and the batches a follower holds.

Both live in the store's ``meta`` table under keys of their own (beside, never
inside, the engine's :class:`~protocol.state.Meta`), so they are written in the
same LMDB transaction as the changes they describe: a crash can never leave a
store whose data and replication record disagree.

* ``repl:state`` — :class:`ReplicationState`: the *epoch* this store last
  served or accepted (the fence: a batch or a write under an older epoch is
  refused), *seq* the last replicated write applied to the data, *version*
  the context version after it.
  *digest* the MAC of that batch, which the next batch's MAC is chained to
  (:func:`~storage.replication.codec.batch_mac`).
* ``repl:held:<seq>`` — the sealed batches this store keeps, ``seq`` ascending:
  those after ``seq`` of the record are *held* (on a follower: received and
  made durable but not applied yet, because the primary had not acknowledged
  them when they arrived; readers of a follower see only applied batches, so
  they never see a commit the primary has not acknowledged); those up to it
  are the *retained log*, the last batches applied or written, kept so a
  follower that fell behind catches up from them (:func:`kept`, :func:`prune`).

* ``repl:copy`` — present while the store holds a follower's copy of its primary's
  data: written with the first batch or catch-up a follower holds and with every
  snapshot it installs, removed when the follower is sealed to become the primary
  (:func:`mark_copy`, :func:`holds_copy`). The epoch is no such marker: a follower of
  an ``acks = 0`` context holds a valid copy at epoch 0, and an empty new store reads
  as epoch 0 too.

A store that was never replicated reads as ``ReplicationState(0, 0, 0)``.

This module works on the LMDB transaction under a view
(:func:`storage.lmdb.in_transaction`): the replication record has to be written
in the very transaction of the data it describes, and the
:class:`~protocol.view.WriteView` interface (the engine's seam) has no place for
it. It is the one module outside :mod:`storage.lmdb` that does so.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace

import lmdb
import msgpack

from protocol.view import ReadView, WriteView
from storage.lmdb import LmdbStore, in_transaction
from storage.replication.codec import CHAIN_START

STATE_KEY = b"repl:state"
HELD_PREFIX = b"repl:held:"
COPY_KEY = b"repl:copy"
_SEQ = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """Where a replicated store stands: ``epoch`` (the fence), ``seq`` applied, ``version``."""

    epoch: int = 0
    seq: int = 0
    version: int = 0
    digest: bytes = CHAIN_START

    def at(self, **changes: int | bytes) -> ReplicationState:
        """This state with *changes* (the other fields kept)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def read_state(view: ReadView) -> ReplicationState:
    """The replication record as *view* sees it."""
    data = in_transaction(view, lambda txn, db: txn.get(STATE_KEY, db=db["meta"]))
    if data is None:
        return ReplicationState()
    fields = msgpack.unpackb(data)
    digest = bytes(fields[3]) if len(fields) > 3 else CHAIN_START
    return ReplicationState(int(fields[0]), int(fields[1]), int(fields[2]), digest)


def write_state(view: WriteView, state: ReplicationState) -> None:
    """Write *state* inside the current write (with the write's LMDB transaction id, so
    that :func:`written_last` can tell whether anything was written after it)."""

    def run(txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]) -> None:
        fields = [state.epoch, state.seq, state.version, state.digest, txn.id()]
        txn.put(STATE_KEY, msgpack.packb(fields), db=db["meta"])

    in_transaction(view, run)


def written_last(store: LmdbStore) -> bool:
    """Whether the last write committed to *store* wrote its replication record: nothing
    was written since outside a batch, a fence or a catch-up (then the store's data is
    exactly what its chain of batches made it)."""

    def run(view: ReadView) -> tuple[int, bytes | None]:
        return in_transaction(view, lambda txn, db: (txn.id(), txn.get(STATE_KEY, db=db["meta"])))

    last, data = store.read(run)
    if data is None:
        return False
    fields = msgpack.unpackb(data)
    return len(fields) > 4 and fields[4] == last


def mark_copy(view: WriteView, copy: bool) -> None:
    """Record inside the current write whether the store holds a follower's copy."""

    def run(txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]) -> None:
        if copy:
            txn.put(COPY_KEY, b"1", db=db["meta"])
        else:
            txn.delete(COPY_KEY, db=db["meta"])

    in_transaction(view, run)


def holds_copy(view: ReadView) -> bool:
    """Whether the store holds a follower's copy of its primary's data (:func:`mark_copy`)."""
    return in_transaction(view, lambda txn, db: txn.get(COPY_KEY, db=db["meta"])) is not None


def store_state(store: LmdbStore) -> ReplicationState:
    """The committed replication record of *store*."""
    return store.read(read_state)


def hold(view: WriteView, seq: int, data: bytes) -> None:
    """Keep the encoded batch *seq* until it is applied (:func:`release`)."""
    key = HELD_PREFIX + _SEQ.pack(seq)
    in_transaction(view, lambda txn, db: txn.put(key, data, db=db["meta"]))


def held(view: ReadView) -> list[tuple[int, bytes]]:
    """The batches held and not applied yet, ``(seq, sealed)``, oldest first."""
    return kept(view, read_state(view).seq + 1)


def kept(view: ReadView, first: int, last: int | None = None) -> list[tuple[int, bytes]]:
    """The batches kept numbered *first* to *last* (default: every later one),
    ``(seq, sealed)``, oldest first."""

    def scan(
        txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]
    ) -> list[tuple[int, bytes]]:
        cursor = txn.cursor(db=db["meta"])
        out: list[tuple[int, bytes]] = []
        if not cursor.set_range(HELD_PREFIX + _SEQ.pack(max(0, first))):
            return out
        for key, value in cursor.iternext():
            if not key.startswith(HELD_PREFIX):
                break
            seq = _SEQ.unpack(key[len(HELD_PREFIX) :])[0]
            if last is not None and seq > last:
                break
            out.append((seq, bytes(value)))
        return out

    return in_transaction(view, scan)


def oldest_kept(view: ReadView) -> int | None:
    """The number of the oldest batch kept, None if none is."""
    first = kept_range(view)
    return None if first is None else first[0]


def kept_range(view: ReadView) -> tuple[int, int] | None:
    """``(oldest, newest)`` numbers of the batches kept, None if none is."""

    def scan(
        txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]
    ) -> tuple[int, int] | None:
        cursor = txn.cursor(db=db["meta"])
        if not cursor.set_range(HELD_PREFIX) or not cursor.key().startswith(HELD_PREFIX):
            return None
        oldest = _SEQ.unpack(cursor.key()[len(HELD_PREFIX) :])[0]
        end = HELD_PREFIX[:-1] + bytes([HELD_PREFIX[-1] + 1])
        if cursor.set_range(end):
            cursor.prev()
        else:
            cursor.last()
        newest = _SEQ.unpack(cursor.key()[len(HELD_PREFIX) :])[0]
        return oldest, newest

    return in_transaction(view, scan)


def prune(view: WriteView, below: int) -> None:
    """Forget the batches kept numbered below *below* (past the retained length)."""

    def run(txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]) -> None:
        cursor = txn.cursor(db=db["meta"])
        if not cursor.set_range(HELD_PREFIX):
            return
        while (key := cursor.key()).startswith(HELD_PREFIX):
            if _SEQ.unpack(key[len(HELD_PREFIX) :])[0] >= below:
                break
            if not cursor.delete():
                break

    in_transaction(view, run)


def release(view: WriteView, seq: int) -> None:
    """Forget the held batch *seq* (applied, or discarded by a snapshot)."""
    key = HELD_PREFIX + _SEQ.pack(seq)
    in_transaction(view, lambda txn, db: txn.delete(key, db=db["meta"]))


def ack_outbox(view: WriteView, upto: int) -> None:
    """Delete the index intents numbered *upto* and below (what the primary's ack did)."""

    def run(txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]) -> None:
        cursor = txn.cursor(db=db["outbox"])
        cursor.first()
        while (key := cursor.key()) and _SEQ.unpack(key)[0] <= upto:
            cursor.delete()

    in_transaction(view, run)
