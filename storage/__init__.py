"""LMDB persistence of one context (see :mod:`storage.lmdb_store`) and the store layout."""

from storage.layout import check_context_name, context_path, open_context
from storage.lmdb_store import CHUNK_CHARS, DEFAULT_MAP_SIZE, LmdbStore

__all__ = [
    "CHUNK_CHARS",
    "DEFAULT_MAP_SIZE",
    "LmdbStore",
    "check_context_name",
    "context_path",
    "open_context",
]
