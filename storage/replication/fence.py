"""The replication record every replicated store keeps, and the batches a follower holds.

Both live in the store's ``meta`` table under keys of their own (beside, never
inside, the engine's :class:`~protocol.state.Meta`), so they are written in the
same LMDB transaction as the changes they describe: a crash can never leave a
store whose data and replication record disagree.

* ``repl:state`` — :class:`ReplicationState`: the *epoch* this store last
  served or accepted (the fence: a batch or a write under an older epoch is
  refused), *seq* the last replicated write applied to the data, *version*
  the context version after it.
* ``repl:held:<seq>`` — on a follower, a batch received and made durable
  but not applied yet, because the primary had not acknowledged it when it
  arrived. Readers of a follower see only applied batches, so they never see
  a commit the primary has not acknowledged.

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
from dataclasses import dataclass

import lmdb
import msgpack

from protocol.view import ReadView, WriteView
from storage.lmdb import LmdbStore, in_transaction

STATE_KEY = b"repl:state"
HELD_PREFIX = b"repl:held:"
_SEQ = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class ReplicationState:
    """Where a replicated store stands: ``epoch`` (the fence), ``seq`` applied, ``version``."""

    epoch: int = 0
    seq: int = 0
    version: int = 0


def read_state(view: ReadView) -> ReplicationState:
    """The replication record as *view* sees it."""
    data = in_transaction(view, lambda txn, db: txn.get(STATE_KEY, db=db["meta"]))
    if data is None:
        return ReplicationState()
    epoch, seq, version = msgpack.unpackb(data)
    return ReplicationState(int(epoch), int(seq), int(version))


def write_state(view: WriteView, state: ReplicationState) -> None:
    """Write *state* inside the current write."""
    record = msgpack.packb([state.epoch, state.seq, state.version])
    in_transaction(view, lambda txn, db: txn.put(STATE_KEY, record, db=db["meta"]))


def store_state(store: LmdbStore) -> ReplicationState:
    """The committed replication record of *store*."""
    return store.read(read_state)


def hold(view: WriteView, seq: int, data: bytes) -> None:
    """Keep the encoded batch *seq* until it is applied (:func:`release`)."""
    key = HELD_PREFIX + _SEQ.pack(seq)
    in_transaction(view, lambda txn, db: txn.put(key, data, db=db["meta"]))


def held(view: ReadView) -> list[tuple[int, bytes]]:
    """The batches held and not applied yet, ``(seq, encoded)``, oldest first."""

    def scan(
        txn: lmdb.Transaction[bytes], db: Mapping[str, lmdb._Database]
    ) -> list[tuple[int, bytes]]:
        cursor = txn.cursor(db=db["meta"])
        out: list[tuple[int, bytes]] = []
        if not cursor.set_range(HELD_PREFIX):
            return out
        for key, value in cursor.iternext():
            if not key.startswith(HELD_PREFIX):
                break
            out.append((_SEQ.unpack(key[len(HELD_PREFIX) :])[0], bytes(value)))
        return out

    return in_transaction(view, scan)


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
