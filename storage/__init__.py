"""Persistence of contexts: one LMDB environment per context (:mod:`storage.lmdb_store`),
the in-memory backend the same contract suite runs against (:mod:`storage.memory`), the
store layout, and the search index built from the outbox (:mod:`storage.search`).

Nothing here builds the application object: that is :mod:`service`.
"""

from storage.layout import check_context_name, context_path
from storage.lmdb_store import CHUNK_CHARS, DEFAULT_MAP_SIZE, LmdbStore
from storage.memory import MemoryBackend

__all__ = [
    "CHUNK_CHARS",
    "DEFAULT_MAP_SIZE",
    "LmdbStore",
    "MemoryBackend",
    "check_context_name",
    "context_path",
]
