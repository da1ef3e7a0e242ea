"""The LMDB environment of a context: opening it, its format, the writer lock, error translation.

One environment is open per directory in a process (LMDB forbids a second),
shared by every :class:`~storage.lmdb.store.LmdbStore` opened on the path; the
gate, the retried reads and writes and the map growth are those of every LMDB
environment of the project (:class:`storage.environment.Environment`). A
writing store holds ``<path>/writer.lock`` with an exclusive ``flock`` for as
long as it is open.

Names with a leading underscore are shared between the modules of
:mod:`storage.lmdb` only; :mod:`storage.lmdb` lists the public ones.
"""

from __future__ import annotations

import errno
import fcntl
import os

import lmdb

from protocol.errors import StoreError, StoreFull, StoreLocked
from storage.environment import Environment
from storage.environment import max_map_size as max_map_ceiling
from storage.layout import DIR_MODE, FILE_MODE
from storage.lmdb.records import (
    _DB_NAMES,
    _FORMAT,
    _MAIN,
    _MAX_DBS,
    _OPTIONAL_DBS,
    MIGRATIONS,
    READABLE_FORMATS,
    STORE_FORMAT,
    _Decoded,
)


def _store_error(e: lmdb.Error) -> StoreError:
    return StoreError(f"LMDB failed: {e}")


class _Env(Environment):
    """The environment of one context store, shared by the stores opened on its path.

    LMDB forbids opening an environment twice in one process, so a read-only
    store opened while a writer is open here uses the writer's environment.
    """

    def __init__(
        self,
        key: str,
        env: lmdb.Environment,
        dbs: dict[str, lmdb._Database],
        max_size: int | None = None,
        fmt: int = STORE_FORMAT,
    ) -> None:
        super().__init__(key, env, dbs, "context store", max_size)
        self.readonly = bool(env.flags()["readonly"])
        self.writer = False
        self.decoded = _Decoded()
        self.format = fmt
        """The store's format as last seen; only a read-only environment may see an
        older one, until a writer elsewhere migrates the store (:meth:`format_in`)."""

    def format_in(self, txn: lmdb.Transaction[bytes]) -> int:
        """The format of the snapshot *txn* reads (a writer in another process may have
        migrated the store since this environment was opened)."""
        if self.format == STORE_FORMAT:
            return STORE_FORMAT
        fmt = txn.get(_FORMAT, db=self.dbs["meta"])
        if fmt and fmt[0] in READABLE_FORMATS and fmt[0] > self.format:
            self.format = fmt[0]  # formats only move forward
        return self.format

    def migrate(self) -> None:
        """Bring an older store to :data:`STORE_FORMAT` in one durable write (writers only)."""
        if self.format == STORE_FORMAT:
            return

        def run(txn: lmdb.Transaction[bytes]) -> None:
            fmt = txn.get(_FORMAT, db=self.dbs["meta"])
            step = fmt[0] if fmt else STORE_FORMAT
            while step < STORE_FORMAT:
                MIGRATIONS[step](txn, self.dbs)
                step += 1

        self.write(run)
        self.format = STORE_FORMAT

    def error(self, e: lmdb.Error, doing: str) -> StoreError:
        full = super().error(e, doing)
        return full if isinstance(full, StoreFull) else _store_error(e)


def _take_writer_lock(path: str) -> int:
    lock_path = os.path.join(path, "writer.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError as e:
        raise StoreError(f"cannot open the writer lock {lock_path}: {e}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StoreLocked(
                f"context store {path} is open for writing in another process "
                f"(it holds {lock_path}); close it there or open this one read-only"
            ) from e
        raise StoreError(f"cannot lock {lock_path}: {e}") from e
    return fd


def _open_env(
    key: str, *, readonly: bool, sync: bool, map_size: int, max_map_size: int | None = None
) -> _Env:
    if max_map_size is None:
        max_map_size = max_map_ceiling()
    map_size = min(map_size, max_map_size)  # an existing larger file keeps its size
    try:
        env = lmdb.open(
            key,
            map_size=map_size,
            subdir=True,
            readonly=readonly,
            create=not readonly,
            sync=sync,
            metasync=True,
            max_dbs=_MAX_DBS,
            lock=True,
            mode=DIR_MODE,  # the directory 0700, data and lock files 0600
        )
    except lmdb.Error as e:
        raise StoreError(f"cannot open the context store {key}: {e}") from e
    try:
        if readonly:
            # A handle opened inside a read transaction dies with it; let lmdb open each.
            dbs = {name: env.open_db(name.encode(), create=False) for name in _DB_NAMES}
            dbs[_MAIN] = env.open_db(None)
            for name in _OPTIONAL_DBS:
                try:
                    dbs[name] = env.open_db(name.encode(), create=False)
                except lmdb.NotFoundError:
                    pass  # an older store: nothing was ever audited in it
            with env.begin() as txn:
                fmt = txn.get(_FORMAT, db=dbs["meta"])
        else:
            with env.begin(write=True) as txn:
                names = _DB_NAMES + _OPTIONAL_DBS
                dbs = {name: env.open_db(name.encode(), txn=txn) for name in names}
                dbs[_MAIN] = env.open_db(None, txn=txn)
                fmt = txn.get(_FORMAT, db=dbs["meta"])
                if fmt is None:
                    fmt = bytes([STORE_FORMAT])
                    txn.put(_FORMAT, fmt, db=dbs["meta"])
        if fmt is not None and (len(fmt) != 1 or fmt[0] not in READABLE_FORMATS):
            known = " or ".join(str(n) for n in READABLE_FORMATS)
            raise StoreError(f"context store {key} has format {fmt!r}, not {known}")
    except lmdb.NotFoundError as e:
        env.close()
        raise StoreError(f"context store {key} is not initialised yet: {e}") from e
    except lmdb.Error as e:
        env.close()
        raise StoreError(f"cannot open the context store {key}: {e}") from e
    except BaseException:
        env.close()
        raise
    return _Env(key, env, dbs, max_map_size, fmt[0] if fmt else STORE_FORMAT)
