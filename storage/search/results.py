"""What a search answers: its hits, best first, and how far the index is behind the context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a frame (``id`` is its id) or an event (``id`` is ``@eN``)."""

    id: str
    type: str
    kind: str
    lifecycle: str
    score: float
    snippet: str
    time: float
    trust: str | None = None
    """The frame's trust status; None for events."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz search`` (``trust`` only for frames)."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "kind": self.kind,
            "lifecycle": self.lifecycle,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "time": self.time,
        }
        if self.trust is not None:
            out["trust"] = self.trust
        return out


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Hits, best first, and how far the index is behind the context.

    ``version`` is the context's version when the search ran (None if unknown),
    ``indexed_version`` the version the index reflects, ``lag`` the number of
    index intents not yet applied (None if unknown). ``approximate`` is True
    when a cap of the ranking was reached (see the module docstring).
    """

    query: str
    terms: tuple[str, ...]
    hits: tuple[Hit, ...]
    version: int | None
    indexed_version: int
    lag: int | None
    approximate: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz search``."""
        return {
            "query": self.query,
            "terms": list(self.terms),
            "hits": [h.to_dict() for h in self.hits],
            "version": self.version,
            "indexed_version": self.indexed_version,
            "lag": self.lag,
            "approximate": self.approximate,
        }
