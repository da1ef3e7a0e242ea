"""LMDB persistence of one context (see :mod:`storage.lmdb_store`)."""

from storage.lmdb_store import CHUNK_CHARS, DEFAULT_MAP_SIZE, LmdbStore

__all__ = ["CHUNK_CHARS", "DEFAULT_MAP_SIZE", "LmdbStore"]
