"""LMDB persistence of one context: one LMDB environment per context directory.

Modules by concern: :mod:`~storage.lmdb.environment` (open, format, writer
lock, error translation; the gate, retries and map growth are
:mod:`storage.environment`'s, shared with the derived indexes),
:mod:`~storage.lmdb.records` (named databases, key layout, record codecs),
:mod:`~storage.lmdb.views` (the read and write views, and :func:`in_transaction`:
the raw transaction under a view), :mod:`~storage.lmdb.audit` (the audit table)
and :mod:`~storage.lmdb.store` (:class:`LmdbStore`).

Names with a leading underscore in these modules are shared between them only;
other packages (:mod:`storage.replication`) use the names listed here.
"""

from storage.environment import DEFAULT_MAP_SIZE, MAX_MAP_SIZE, MapFull
from storage.lmdb.records import CHUNK_CHARS, STORE_FORMAT
from storage.lmdb.store import LmdbStore
from storage.lmdb.views import in_transaction

__all__ = [
    "CHUNK_CHARS",
    "DEFAULT_MAP_SIZE",
    "LmdbStore",
    "MAX_MAP_SIZE",
    "MapFull",
    "STORE_FORMAT",
    "in_transaction",
]
