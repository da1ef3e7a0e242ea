"""Persistence of contexts: one LMDB environment per context (:mod:`storage.lmdb`),
the in-memory backend the same contract suite runs against (:mod:`storage.memory`),
the :class:`Backend` protocol both satisfy (:mod:`storage.backend`), the store layout,
and the search index built from the outbox (:mod:`storage.search`).

Nothing here builds the application object: that is :mod:`service`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from storage.backend import Backend
from storage.layout import check_context_name, context_path
from storage.lmdb import CHUNK_CHARS, DEFAULT_MAP_SIZE, LmdbStore
from storage.memory import MemoryBackend

if _TYPE_CHECKING:

    def _conforms(lmdb_store: LmdbStore, memory: MemoryBackend) -> tuple[Backend, Backend]:
        # mypy fails here the day either backend stops satisfying the protocol.
        return lmdb_store, memory


__all__ = [
    "Backend",
    "CHUNK_CHARS",
    "DEFAULT_MAP_SIZE",
    "LmdbStore",
    "MemoryBackend",
    "check_context_name",
    "context_path",
]
