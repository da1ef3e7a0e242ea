"""The audit table of an LMDB store (R42, R43): rows as the append rule uses them, and paged reads.

Rows live in the ``audit`` database under ``u64(sequence)``; the bookkeeping of
:func:`protocol.governance.append_audit` (last sequence number, the coalescing
window, the count of refused rows kept) is ``meta/audit_state``. The ``audit``
database is created by the first writing open; a read-only open of an older
store that lacks it reads an empty audit log.

Names with a leading underscore are shared between the modules of
:mod:`storage.lmdb` only; :mod:`storage.lmdb` lists the public ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb

from storage.lmdb.records import _AUDIT_STATE, _U64, _U64_MAX, _pack, _u64, _unpack


class _AuditRows:
    """The ``audit`` database inside one write, as :func:`append_audit` uses it."""

    __slots__ = ("_txn", "_db", "_meta")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database]) -> None:
        self._txn = txn
        self._db = dbs["audit"]
        self._meta = dbs["meta"]

    def get(self, seq: int) -> dict[str, Any] | None:
        data = self._txn.get(_u64(seq), db=self._db)
        return None if data is None else _unpack(data)

    def put(self, seq: int, record: dict[str, Any]) -> None:
        self._txn.put(_u64(seq), _pack(record), db=self._db)

    def delete(self, seq: int) -> None:
        self._txn.delete(_u64(seq), db=self._db)

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        cursor = self._txn.cursor(db=self._db)
        if seq >= _U64_MAX or not cursor.set_range(_u64(max(seq + 1, 0))):
            return
        for key, value in cursor.iternext():
            yield _U64.unpack(key)[0], _unpack(value)

    def state(self) -> dict[str, Any] | None:
        data = self._txn.get(_AUDIT_STATE, db=self._meta)
        return None if data is None else _unpack(data)

    def set_state(self, state: dict[str, Any]) -> None:
        self._txn.put(_AUDIT_STATE, _pack(state), db=self._meta)


def _audit_page(
    txn: lmdb.Transaction[bytes], dbs: dict[str, lmdb._Database], after: int, limit: int
) -> list[tuple[int, dict[str, Any]]]:
    """Up to *limit* audit rows numbered above *after*, oldest first; none without the table."""
    db = dbs.get("audit")
    if db is None or limit <= 0 or after >= _U64_MAX:
        return []
    cursor = txn.cursor(db=db)
    out: list[tuple[int, dict[str, Any]]] = []
    if not cursor.set_range(_u64(max(after + 1, 0))):
        return out
    for key, value in cursor.iternext():
        out.append((_U64.unpack(key)[0], _unpack(value)))
        if len(out) >= limit:
            break
    return out


def _audit_newest(
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, lmdb._Database],
    before: int | None,
    limit: int,
) -> list[tuple[int, dict[str, Any]]]:
    """Up to *limit* audit rows numbered below *before* (None: from the last), newest first."""
    db = dbs.get("audit")
    if db is None or limit <= 0:
        return []
    cursor = txn.cursor(db=db)
    if before is None or before > _U64_MAX:
        found = cursor.last()
    elif cursor.set_range(_u64(before)):
        found = cursor.prev()
    else:  # every row is below *before*
        found = cursor.last()
    out: list[tuple[int, dict[str, Any]]] = []
    while found and len(out) < limit:
        out.append((_U64.unpack(cursor.key())[0], _unpack(cursor.value())))
        found = cursor.prev()
    return out
