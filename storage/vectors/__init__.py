"""Semantic search over a context: a vector index fed by the outbox, and rank fusion.

Modules: :mod:`~storage.vectors.format` (layout, state), :mod:`~storage.vectors.filters`
(the lexical search's filters on vector hits), :mod:`~storage.vectors.neighbours`
(the vectors in memory: exact, or an HNSW graph above a size),
:mod:`~storage.vectors.index` (:class:`VectorIndex`), :mod:`~storage.vectors.worker`
(:class:`VectorWorker`), :mod:`~storage.vectors.outbox` (:class:`SharedOutbox`:
the outbox acknowledged up to the slowest index) and :mod:`~storage.vectors.fusion`
(reciprocal-rank fusion).
"""

from storage.vectors.documents import VectorHit, VectorResult
from storage.vectors.filters import VectorFilter, make_filter
from storage.vectors.format import FRAME_LABEL, MAX_EMBED_CHARS, VECTOR_DIR, VECTOR_FORMAT
from storage.vectors.fusion import RRF_K, fuse
from storage.vectors.index import VectorIndex
from storage.vectors.neighbours import EXACT_LIMIT, Neighbours
from storage.vectors.outbox import SharedOutbox
from storage.vectors.worker import VectorWorker

__all__ = [
    "EXACT_LIMIT",
    "FRAME_LABEL",
    "MAX_EMBED_CHARS",
    "Neighbours",
    "RRF_K",
    "SharedOutbox",
    "VECTOR_DIR",
    "VECTOR_FORMAT",
    "VectorFilter",
    "VectorHit",
    "VectorIndex",
    "VectorResult",
    "VectorWorker",
    "fuse",
    "make_filter",
]
