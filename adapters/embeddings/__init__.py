"""Embedding clients: the two implementations of storage's :class:`Embedder` interface.

:mod:`~adapters.embeddings.base` (:class:`EmbedderConfig` and the checks every client
shares), :mod:`~adapters.embeddings.openai` (:class:`OpenAIEmbedder`, any
OpenAI-compatible ``/v1/embeddings`` endpoint), :mod:`~adapters.embeddings.local`
(:class:`LocalEmbedder`, sentence-transformers, the ``morphz[embed]`` extra) and
:mod:`~adapters.embeddings.providers` (:func:`make_embedder`). The interface they
implement (:class:`Embedder`, :class:`EmbeddingError`, :data:`ERROR_CODES`) is
:mod:`storage.embeddings`, re-exported here so a caller building an embedder needs one
import. See ``docs/embeddings.md``.
"""

from adapters.embeddings.base import PROVIDERS, EmbedderConfig
from adapters.embeddings.local import LocalEmbedder
from adapters.embeddings.openai import OpenAIEmbedder
from adapters.embeddings.providers import make_embedder
from storage.embeddings import ERROR_CODES, Embedder, EmbeddingError

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
