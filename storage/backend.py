"""The :class:`Backend` protocol: everything a context store offers the layers above it.

Two implementations satisfy it, checked by mypy (:mod:`storage`) and by the
contract suite that runs against both: :class:`~storage.lmdb.LmdbStore`
(durable, one LMDB environment per context directory) and
:class:`~storage.memory.MemoryBackend` (dictionaries, nothing survives the
process). The service, the context actor and the governance code use a store
only through these methods; what only LMDB offers (a path, the map size,
``exists``, ``open``) is not part of it.

Writes of every kind go through :meth:`Backend.transact` with a
:class:`~protocol.view.Changeset`: frames, events, the txlog, index intents
(the outbox) and audit rows are written in the one transaction of the change
that caused them, so there is no separate append method to keep in step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from protocol.view import ReadView, WriteView

T = TypeVar("T")


TABLES = (
    "meta",
    "frames",
    "events",
    "event_ids",
    "contents",
    "rel_fwd",
    "rel_rev",
    "cites",
    "lastmod",
    "clients",
    "txlog",
    "history",
    "due",
    "inbox",
    "outbox",
    "traces",
)
"""The tables every backend keeps (one LMDB database or one in-memory map each)."""
OPTIONAL_TABLES = ("audit",)
"""Tables newer than the store format: an older LMDB store lacks them until a writer opens it."""


@runtime_checkable
class Backend(Protocol):
    """What a context needs of a store: snapshot reads, all-or-nothing writes, outbox, audit.

    Guarantees every implementation gives: :meth:`transact` commits all of its
    writes or none, and its reads see its own earlier writes; :meth:`read`
    sees one consistent committed state; views are valid only inside their
    callback; nested :meth:`transact` raises
    :class:`~protocol.errors.StoreError`; outbox and audit numbers increase and
    are never reused; after :meth:`close`, reads and writes raise
    :class:`~protocol.errors.StoreError`.
    """

    @property
    def readonly(self) -> bool:
        """True if this store refuses :meth:`transact` (a read-only open)."""
        ...

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* against one consistent snapshot."""
        ...

    def transact(self, fn: Callable[[WriteView], T]) -> T:
        """Run *fn* in one write transaction; commit if it returns, discard if it raises."""
        ...

    def has_meta(self) -> bool:
        """True once a :class:`~protocol.state.Meta` record has been written."""
        ...

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* index intents numbered above *after*, oldest first."""
        ...

    def outbox_ack(self, upto: int) -> None:
        """Delete the index intents numbered *upto* and below."""
        ...

    def outbox_last(self) -> int:
        """The number of the newest index intent ever appended; 0 if none."""
        ...

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered above *after*, oldest first."""
        ...

    def audit_newest(self, before: int | None, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered below *before* (None: from the newest),
        newest first."""
        ...

    def close(self) -> None:
        """Release the store. Idempotent."""
        ...
