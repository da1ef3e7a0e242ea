"""The one exception tree of Morphz.

::

    MorphzError
     ├── ParseError          malformed S-expression text (carries line and column)
     ├── WireError           malformed, hostile or oversized msgpack / JSON payloads
     ├── RequestError        a well-formed request the runtime refuses
     │    ├── NotFound       an unknown frame id, event reference or version
     │    ├── OutOfRange     an offset, length, depth, window … outside its bounds
     │    └── Overloaded     over a byte budget (per call, per caller, per inbox): retry later
     └── StoreError          the durable store could not be opened or written
          ├── StoreLocked    another process already holds the context's writer lock
          ├── StoreFull      the store's map or its filesystem has no room for a write
          └── TransportError a remote context could not be reached, timed out or lost a reply

A *rejected transaction* is not an exception: it is a receipt with
``status == "rejected"`` (see :mod:`protocol.receipts`). Exceptions are for
input that is not a transaction at all, or for requests the runtime refuses.
Foreign errors (lmdb, msgpack, json, Ray) are translated at the boundary with
``raise ... from e``.
"""

from __future__ import annotations


class MorphzError(Exception):
    """Root of every error Morphz raises on purpose. ``code`` is a stable string."""

    code = "morphz_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description: ``{"error": code, "message": …}``."""
        return {"error": self.code, "message": self.message}


class ParseError(MorphzError):
    """S-expression text that cannot be read; ``line`` and ``column`` are 1-based."""

    code = "parse_error"

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        where = f"{line}:{column}: " if line else ""
        super().__init__(f"{where}{message}")
        self.line = line
        self.column = column

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "line": self.line, "column": self.column}


class WireError(MorphzError):
    """A msgpack or JSON payload that is malformed, of an unknown version or too large."""

    code = "wire_error"


class RequestError(MorphzError):
    """A request the runtime understands but refuses."""

    code = "request_refused"


class NotFound(RequestError):
    """An unknown frame id, event reference, version or context."""

    code = "not_found"


class OutOfRange(RequestError):
    """A numeric argument outside its documented bounds."""

    code = "out_of_range"


class Overloaded(RequestError):
    """A call refused because it would take more than its share of the context's memory
    (the bytes of one call, of one caller's calls in flight, of everything waiting); nothing
    was decided. Retry later, or send less at once."""

    code = "overloaded"


class StoreError(MorphzError):
    """The durable store failed; nothing was acknowledged."""

    code = "store_error"


class StoreLocked(StoreError):
    """Another process holds the writer lock of this context."""

    code = "store_locked"


class StoreFull(StoreError):
    """A write found no room: the store's map reached its ceiling, or its filesystem is
    full. Nothing of the write was applied or acknowledged; reads go on, and writes
    succeed again once room is made (space freed, the ceiling raised)."""

    code = "store_full"


class TransportError(StoreError):
    """A remote context could not be reached: unreachable after the retries, timed out,
    or its reply was lost. Nothing is known to have been acknowledged.

    A subclass of :class:`StoreError` (the class these failures always raised), so
    ``except StoreError`` keeps catching them; ``code`` says which failure it was
    (``actor_unavailable``, or ``actor_error`` for a Ray system failure).
    """

    code = "actor_unavailable"


# The codes of a replicated context's refusals, shared by the store that raises them,
# the actors that answer them and the clients that follow a promotion on them.
FENCED = "fenced"
"""This primary was replaced: it accepts no write (the client calls its successor)."""
STALE_EPOCH = "stale_epoch"
"""A request from an older epoch than the receiver's (an old primary, an old promotion)."""
REPLICA_GAP = "replica_gap"
"""A follower missed a batch: the primary sends it a snapshot instead."""
PROMOTING = "promoting"
"""The directory names this follower the primary, and it is not serving as one yet (the
client calls it again shortly)."""

# The codes of a hosted context's refusals (actors/server/hosting.py), shared by the host
# that answers them, the directory that moves the context and the clients that follow it.
HOST_FULL = "host_full"
"""A context host past its budget takes no new activation (the client may ask the
directory to move the idle context to a host with room)."""
CONTEXT_MOVED = "context_moved"
"""This host gave the context away: the directory names its new host (the client calls it)."""
NOT_LEADER = "not_leader"
"""This context directory does not lead its namespace (a standby, or one a newer term
replaced): it changes nothing and the client asks the leader the signed lead record names
(docs/cluster.md, "A standby directory")."""
HOSTED_UNREPLICATED = "hosted_unreplicated"
"""A context on a context host has no followers: asking for both is refused (docs/cluster.md,
"What a hosted context gives up")."""
