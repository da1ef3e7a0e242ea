"""Replicating one context's store: the primary ships each write, followers apply them in order.

* :mod:`storage.replication.codec` — :class:`Batch`, the wire form of one
  group commit (changesets, rewrites, outbox acknowledgements);
* :mod:`storage.replication.fence` — the replication record (epoch fence,
  last applied batch) and the held batches, kept in the store itself;
* :mod:`storage.replication.recording` — :class:`ReplicatedStore`, the
  primary's backend: records every write and ships it before returning;
* :mod:`storage.replication.follower` — :class:`Follower`, the follower's
  rules (order, gaps, epochs, acknowledged-only reads) and the snapshots that
  start or reset a follower.

No Ray here: how batches travel is the caller's (``actors.cluster.replication``).
"""

from protocol.errors import FENCED, REPLICA_GAP, STALE_EPOCH
from storage.replication.codec import Batch, OutboxAck, decode_batch, encode_batch
from storage.replication.fence import ReplicationState, store_state
from storage.replication.follower import Follower, install, snapshot
from storage.replication.recording import ReplicatedStore, Ship

__all__ = [
    "FENCED",
    "REPLICA_GAP",
    "STALE_EPOCH",
    "Batch",
    "Follower",
    "OutboxAck",
    "ReplicatedStore",
    "ReplicationState",
    "Ship",
    "decode_batch",
    "encode_batch",
    "install",
    "snapshot",
    "store_state",
]
