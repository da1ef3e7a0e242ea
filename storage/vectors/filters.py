"""The lexical search's filters, applied to vector hits: the same arguments, the same errors.

One definition serves both searches (:mod:`storage.search.filters`); a
:class:`VectorFilter` decides a document from the record the vector index keeps
(:class:`~storage.vectors.format.DocRecord`).
"""

from __future__ import annotations

from storage.search.filters import SearchFilter as VectorFilter
from storage.search.filters import make_filter

__all__ = ["VectorFilter", "make_filter"]
