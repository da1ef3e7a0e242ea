"""LMDB persistence of one context: one LMDB environment per context directory.

Modules by concern: :mod:`~storage.lmdb.environment` (open, writer lock, map
resize, error translation), :mod:`~storage.lmdb.records` (named databases, key
layout, record codecs), :mod:`~storage.lmdb.views` (the read and write views),
:mod:`~storage.lmdb.audit` (the audit table) and :mod:`~storage.lmdb.store`
(:class:`LmdbStore`).
"""

from storage.lmdb.environment import DEFAULT_MAP_SIZE, MAX_MAP_SIZE
from storage.lmdb.records import CHUNK_CHARS, STORE_FORMAT
from storage.lmdb.store import LmdbStore

__all__ = [
    "CHUNK_CHARS",
    "DEFAULT_MAP_SIZE",
    "LmdbStore",
    "MAX_MAP_SIZE",
    "STORE_FORMAT",
]
