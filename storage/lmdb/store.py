"""The LMDB store of one context (:class:`LmdbStore`): open, read, transact, outbox, audit, close.

The environment and its locks are :mod:`storage.lmdb.environment`, the key
layout and codecs :mod:`storage.lmdb.records`, the views handed to callbacks
:mod:`storage.lmdb.views`, the audit table :mod:`storage.lmdb.audit`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import lmdb

from protocol.errors import StoreError, StoreLocked
from protocol.view import ReadView, WriteView
from storage.environment import DEFAULT_MAP_SIZE, OPEN, OPEN_LOCK, MapFull
from storage.layout import DIR_MODE
from storage.lmdb.audit import _audit_newest, _audit_page
from storage.lmdb.environment import _Env, _open_env, _store_error, _take_writer_lock
from storage.lmdb.records import _U64, _U64_MAX, _meta_place, _u64, _unpack
from storage.lmdb.views import _LmdbReadView, _LmdbWriteView

T = TypeVar("T")


class LmdbStore:
    """The durable store of one context: an LMDB environment in its own directory.

    Guarantees: :meth:`transact` commits all of its writes or none, durably
    (fsync) before it returns unless opened with ``sync=False``; reads inside
    it see its own earlier writes; :meth:`read` sees one committed snapshot;
    at most one :class:`LmdbStore` per directory writes at a time, across
    processes; the map grows by itself. Views handed to callbacks, and the
    iterators they return, are valid only inside the callback. Every LMDB
    failure surfaces as :class:`~protocol.errors.StoreError`.
    """

    def __init__(self, shared: _Env, path: str, readonly: bool, lock_fd: int | None) -> None:
        """Use :meth:`open`."""
        self._shared = shared
        self._path = path
        self._readonly = readonly
        self._lock_fd = lock_fd
        self._closed = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        readonly: bool = False,
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int | None = None,
    ) -> LmdbStore:
        """Open the context store at *path*, creating it unless ``create=False`` or *readonly*.

        A writing open takes ``<path>/writer.lock``; if another process or
        another open store of this process writes to *path*, it raises
        :class:`~protocol.errors.StoreLocked`. A read-only open takes no lock
        and may run beside a writer. Opening reads the format marker only, so
        it takes the same time whatever the store holds. ``sync=False`` gives
        up durability (for benchmarks and tests); ``map_size`` is the initial
        map size, for tests; ``max_map_size`` its ceiling (default: 16 TiB, or the
        ``MORPHZ_MAX_MAP_SIZE`` environment variable), past which a write fails with
        :class:`~protocol.errors.StoreFull` (when the environment is first opened in
        this process).
        """
        where = os.fspath(path)
        if readonly or not create:
            if not cls.exists(where):
                raise StoreError(f"no context store at {where}")
        else:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(where)), DIR_MODE, exist_ok=True)
                os.makedirs(where, DIR_MODE, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the context store {where}: {e}") from e
        key = os.path.realpath(where)
        with OPEN_LOCK:
            shared = OPEN.get(key)
            if shared is not None and not isinstance(shared, _Env):
                raise StoreError(f"{where} is open here as a {shared.what}, not a context store")
            lock_fd: int | None = None
            if not readonly:
                if shared is not None and shared.writer:
                    raise StoreLocked(f"context store {where} is already open for writing here")
                if shared is not None and shared.readonly:
                    raise StoreError(
                        f"context store {where} is open read-only in this process; "
                        "close it before opening it for writing"
                    )
                lock_fd = _take_writer_lock(key)
            try:
                if shared is None:
                    shared = _open_env(
                        key,
                        readonly=readonly,
                        sync=sync,
                        map_size=map_size,
                        max_map_size=max_map_size,
                    )
                    if not readonly:
                        try:
                            shared.migrate()  # an older format: one durable write, once
                        except BaseException:
                            shared.close()
                            raise
                    OPEN[key] = shared
            except BaseException:
                if lock_fd is not None:
                    os.close(lock_fd)
                raise
            shared.refs += 1
            if not readonly:
                shared.writer = True
        return cls(shared, where, readonly, lock_fd)

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """True if a context store has been created at *path*."""
        return os.path.isfile(os.path.join(os.fspath(path), "data.mdb"))

    @property
    def path(self) -> str:
        """The directory this store was opened at."""
        return self._path

    @property
    def readonly(self) -> bool:
        """True if this store was opened read-only."""
        return self._readonly

    @property
    def map_size(self) -> int:
        """The current size of the LMDB map in bytes."""
        return self._env().map_size

    def _env(self) -> _Env:
        if self._closed:
            raise StoreError(f"context store {self._path} is closed")
        return self._shared

    def has_meta(self) -> bool:
        """True once a :class:`~protocol.state.Meta` record has been written."""

        def run(view: ReadView) -> bool:
            assert isinstance(view, _LmdbReadView)
            key, _, db = _meta_place(view._format)
            return view._txn.get(key, db=view._db[db]) is not None

        return self.read(run)

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* on one committed snapshot; the view is valid only inside *fn*."""
        shared = self._env()

        def run(txn: lmdb.Transaction[bytes]) -> T:
            view = _LmdbReadView(txn, shared.dbs, shared.decoded, shared.format_in(txn))
            try:
                return fn(view)
            finally:
                view._closed = True

        return shared.read(run)

    def transact(self, fn: Callable[[WriteView], T]) -> T:
        """Run *fn* in one write transaction: commit if it returns, abort if it raises.

        The commit is durable when this returns (unless ``sync=False``). If the
        map fills up, the transaction is aborted, the map doubled and *fn* run
        again from the start, so *fn* must have no effects outside the view.
        Transactions cannot nest; :class:`StoreError` if they do.
        """
        shared = self._env()
        if self._readonly:
            raise StoreError(f"context store {self._path} is open read-only")

        def run(txn: lmdb.Transaction[bytes]) -> T:
            view = _LmdbWriteView(txn, shared.dbs, shared.decoded)
            try:
                result = fn(view)
                if view._map_full:  # fn swallowed the error; the transaction is unusable
                    raise MapFull("the LMDB map is full")
                view._finish()
                return result
            except BaseException as e:
                if view._map_full and not isinstance(e, MapFull):
                    raise MapFull("the LMDB map is full") from e
                raise
            finally:
                view._closed = True

        return shared.write(run)

    def copy_to(self, dest: str, fn: Callable[[ReadView], T]) -> T:
        """Copy the store's data, compacted, into the empty directory *dest* and run *fn*
        on the very snapshot copied (one read transaction: what *fn* reads agrees with
        the copy). LMDB and disk failures raise :class:`StoreError`."""
        env = self._env().env

        def run(view: ReadView) -> T:
            assert isinstance(view, _LmdbReadView)
            env.copy(dest, compact=True, txn=view._txn)
            return fn(view)

        try:
            return self.read(run)
        except OSError as e:
            raise StoreError(f"cannot copy the context store {self._path}: {e}") from e

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* index intents numbered above *after*, oldest first."""
        if limit <= 0 or after >= _U64_MAX:
            return []

        def run(view: ReadView) -> list[tuple[int, dict[str, Any]]]:
            assert isinstance(view, _LmdbReadView)
            out: list[tuple[int, dict[str, Any]]] = []
            for key, value in view._iterate(view._scan("outbox", _u64(max(after + 1, 0)))):
                out.append((_U64.unpack(key)[0], _unpack(value)))
                if len(out) >= limit:
                    break
            return out

        return self.read(run)

    def outbox_ack(self, upto: int) -> None:
        """Delete the index intents numbered *upto* and below. Numbers are never reused."""

        def run(view: WriteView) -> None:
            assert isinstance(view, _LmdbWriteView)
            cursor = view._txn.cursor(db=view._db["outbox"])
            try:
                cursor.first()
                while (key := cursor.key()) and _U64.unpack(key)[0] <= upto:
                    cursor.delete()
            except lmdb.MapFullError as e:
                view._map_full = True
                raise MapFull("the LMDB map is full") from e
            except lmdb.Error as e:
                raise _store_error(e) from e

        self.transact(run)

    def outbox_last(self) -> int:
        """The number of the newest index intent ever appended; 0 if none."""

        def run(view: ReadView) -> int:
            assert isinstance(view, _LmdbReadView)
            _, key, db = _meta_place(view._format)
            data = view._txn.get(key, db=view._db[db])
            return 0 if data is None else int(_U64.unpack(data)[0])

        return self.read(run)

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered above *after*, oldest first.

        Works on a read-only open beside the writer (``morphz audit``); a store
        made before the audit table existed reads as empty.
        """
        if limit <= 0 or after >= _U64_MAX:
            return []

        def run(view: ReadView) -> list[tuple[int, dict[str, Any]]]:
            assert isinstance(view, _LmdbReadView)
            try:
                return _audit_page(view._txn, view._db, after, limit)
            except lmdb.Error as e:
                raise _store_error(e) from e

        return self.read(run)

    def audit_newest(self, before: int | None, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered below *before* (None: from the newest),
        newest first; empty for a store made before the audit table existed."""
        if limit <= 0 or (before is not None and before <= 1):
            return []

        def run(view: ReadView) -> list[tuple[int, dict[str, Any]]]:
            assert isinstance(view, _LmdbReadView)
            try:
                return _audit_newest(view._txn, view._db, before, limit)
            except lmdb.Error as e:
                raise _store_error(e) from e

        return self.read(run)

    def close(self) -> None:
        """Release the environment and the writer lock. Idempotent.

        Call it after every read and transact of this store has returned.
        """
        with OPEN_LOCK:
            if self._closed:
                return
            self._closed = True
            shared = self._shared
            if self._lock_fd is not None:
                shared.writer = False
            try:
                shared.release()
            finally:
                if self._lock_fd is not None:
                    os.close(self._lock_fd)  # releases the flock
                    self._lock_fd = None

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "closed" if self._closed else "read-only" if self._readonly else "writer"
        return f"LmdbStore({self._path!r}, {mode})"
