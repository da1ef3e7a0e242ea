"""What a search answers: its hits, best first, and how far the index is behind the context.

A lexical search (no embedder configured) answers exactly the shapes it
always did. A hybrid search (lexical and semantic, fused by reciprocal rank:
:func:`storage.vectors.fuse`) adds, per hit, the ``signals`` that found it
and, per result, the state of the semantic side (:class:`SemanticInfo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Signal:
    """One ranking that found a hit: ``name`` (``lexical`` or ``semantic``), its ``rank``
    there (from 1) and its ``score`` there (BM25, or the cosine similarity)."""

    name: str
    rank: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"name", "rank", "score"}``."""
        return {"name": self.name, "rank": self.rank, "score": round(self.score, 6)}


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a frame (``id`` is its id) or an event (``id`` is ``@eN``).

    In a hybrid search ``score`` is the fused score and ``signals`` name the
    rankings that found the hit, in the order ``lexical``, ``neighbours``,
    ``semantic``. ``neighbours`` is the evidence lent by the adjacent turns of
    the hit's session (:func:`storage.search.ranking._lend`; its ``score`` is the
    share lent, and without ``lexical`` the turn holds no word of the query).
    A lexical search leaves ``signals`` empty (unless asked to explain:
    :meth:`~storage.search.index.LexicalIndex.search`).
    """

    id: str
    type: str
    kind: str
    lifecycle: str
    score: float
    snippet: str
    time: float
    trust: str | None = None
    """The frame's trust status; None for events."""
    signals: tuple[Signal, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz search`` (``trust`` only for frames,
        ``signals`` only in a hybrid search)."""
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
        if self.signals:
            out["signals"] = [s.to_dict() for s in self.signals]
        return out


@dataclass(frozen=True, slots=True)
class SemanticInfo:
    """The semantic side of a hybrid search.

    ``model`` is the embedder's model id; ``indexed_version`` the context
    version the vectors reflect, ``lag`` the outbox intents not embedded yet
    (None if unknown); ``building`` is True while the vectors are rebuilt
    (a new model, a new index); ``approximate`` when the neighbour graph
    answered. ``degraded`` is None when the semantic side answered, else why
    it did not (``"embed_unreachable: …"``): the hits are then lexical only.
    """

    model: str
    indexed_version: int
    lag: int | None
    building: bool = False
    approximate: bool = False
    degraded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (every field)."""
        return {
            "model": self.model,
            "indexed_version": self.indexed_version,
            "lag": self.lag,
            "building": self.building,
            "approximate": self.approximate,
            "degraded": self.degraded,
        }


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Hits, best first, and how far the index is behind the context.

    ``version`` is the context's version when the search ran (None if unknown),
    ``indexed_version`` the version the index reflects, ``lag`` the number of
    index intents not yet applied (None if unknown). ``approximate`` is True
    when a cap of the ranking was reached (see the module docstring).
    ``semantic`` is None for a lexical search, else the state of the semantic
    side of a hybrid one (the fields above are then the lexical index's).
    """

    query: str
    terms: tuple[str, ...]
    hits: tuple[Hit, ...]
    version: int | None
    indexed_version: int
    lag: int | None
    approximate: bool = False
    semantic: SemanticInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``morphz search`` (``semantic`` only when hybrid)."""
        out: dict[str, Any] = {
            "query": self.query,
            "terms": list(self.terms),
            "hits": [h.to_dict() for h in self.hits],
            "version": self.version,
            "indexed_version": self.indexed_version,
            "lag": self.lag,
            "approximate": self.approximate,
        }
        if self.semantic is not None:
            out["semantic"] = self.semantic.to_dict()
        return out
