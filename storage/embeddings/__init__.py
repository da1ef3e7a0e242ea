"""Embeddings: the interface every embedder implements and its two implementations.

:mod:`~storage.embeddings.base` (the :class:`Embedder` protocol, :class:`EmbeddingError`,
:class:`EmbedderConfig`), :mod:`~storage.embeddings.openai` (:class:`OpenAIEmbedder`, any
OpenAI-compatible ``/v1/embeddings`` endpoint), :mod:`~storage.embeddings.local`
(:class:`LocalEmbedder`, sentence-transformers, the ``morphz[embed]`` extra) and
:mod:`~storage.embeddings.providers` (:func:`make_embedder`). See ``docs/embeddings.md``.
"""

from storage.embeddings.base import (
    ERROR_CODES,
    PROVIDERS,
    Embedder,
    EmbedderConfig,
    EmbeddingError,
)
from storage.embeddings.local import LocalEmbedder
from storage.embeddings.openai import OpenAIEmbedder
from storage.embeddings.providers import make_embedder

__all__ = [
    "ERROR_CODES",
    "Embedder",
    "EmbedderConfig",
    "EmbeddingError",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "PROVIDERS",
    "make_embedder",
]
