"""One outbox, two consumers: intents are dropped only once both indexes applied them.

The lexical index and the vector index both read the context's outbox and
each acknowledges what it applied. The outbox is a queue, not a log: an
acknowledged intent is deleted. So each index is handed a :class:`SharedOutbox`
instead of the store itself: it reads, and counts intents, like the store, but
its :meth:`SharedOutbox.outbox_ack` deletes only up to the *lowest* position
that every consumer has applied (each consumer's ``applied()``, read from its
own durable state). The slower consumer (embedding is slower than indexing
words) holds the intents back for itself, and neither ever sees a gap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from protocol.view import ReadView

T = TypeVar("T")


class SharedOutbox:
    """A context store as an index sees it, acknowledging up to the slowest consumer.

    *backend* is the context's store; *consumers* answer the last intent each
    consumer has applied. Everything but :meth:`outbox_ack` is the store's own
    (``read``, ``outbox_read``, ``outbox_last``, ``readonly``, ``path``).
    """

    def __init__(self, backend: Any, consumers: list[Callable[[], int]] | None = None) -> None:
        self.backend = backend
        self.consumers: list[Callable[[], int]] = list(consumers or [])

    @property
    def readonly(self) -> bool:
        """True if the store refuses writes (then nothing is acknowledged)."""
        return bool(getattr(self.backend, "readonly", False))

    @property
    def path(self) -> Any:
        """The store's directory."""
        return getattr(self.backend, "path", None)

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* against one consistent snapshot of the store."""
        result: T = self.backend.read(fn)
        return result

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* intents numbered above *after*, oldest first."""
        result: list[tuple[int, dict[str, Any]]] = self.backend.outbox_read(after, limit)
        return result

    def outbox_last(self) -> int:
        """The number of the newest intent ever appended."""
        return int(self.backend.outbox_last())

    def floor(self) -> int:
        """The last intent every consumer has applied."""
        return min((int(c()) for c in self.consumers), default=0)

    def outbox_ack(self, upto: int) -> None:
        """Delete the intents up to *upto* that every consumer has applied."""
        if self.readonly:
            return
        upto = min(upto, self.floor()) if self.consumers else upto
        if upto > 0:
            self.backend.outbox_ack(upto)
