"""The LMDB environment of a context: opening it, the writer lock, map resizes, error translation.

One environment is open per directory in a process (LMDB forbids a second),
shared by every :class:`~storage.lmdb.store.LmdbStore` opened on the path. A
writing store holds ``<path>/writer.lock`` with an exclusive ``flock`` for as
long as it is open. The map starts at :data:`DEFAULT_MAP_SIZE` and doubles
whenever a write fills it, up to :data:`MAX_MAP_SIZE`; :class:`_Gate` holds
this process's transactions off while it is remapped.

Names with a leading underscore are shared between the modules of
:mod:`storage.lmdb` only; :mod:`storage.lmdb` lists the public ones.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
import threading

import lmdb

from protocol.errors import StoreError, StoreLocked
from storage.layout import DIR_MODE, FILE_MODE
from storage.lmdb.records import _DB_NAMES, _FORMAT, _MAX_DBS, _OPTIONAL_DBS, STORE_FORMAT, _Decoded

DEFAULT_MAP_SIZE = 64 << 20
"""Initial map size of a new environment; the map doubles whenever a write fills it."""
MAX_MAP_SIZE = 1 << 44
"""The map never grows past this (16 TiB); a write that would need more fails."""


class _MapFull(StoreError):
    """Raised inside a write when the map is full; :meth:`LmdbStore.transact` grows and retries."""


class _Retry(enum.Enum):
    GROW = "grow"
    ADOPT = "adopt"


def _store_error(e: lmdb.Error) -> StoreError:
    return StoreError(f"LMDB failed: {e}")


class _Gate:
    """Counts this process's open transactions on one environment.

    ``set_mapsize`` remaps the file and must run with no transaction open in
    the process; :meth:`resize` waits for them to end and holds new ones off.
    A thread that already holds a transaction is never held off, so nested
    reads cannot deadlock; such a thread may not resize (it would wait for
    itself) and gets a :class:`StoreError` instead.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._resizing = False
        self._local = threading.local()

    def _depth(self) -> int:
        depth: int = getattr(self._local, "depth", 0)
        return depth

    def enter(self) -> None:
        depth = self._depth()
        with self._cond:
            while self._resizing and not depth:
                self._cond.wait()
            self._active += 1
        self._local.depth = depth + 1

    def leave(self) -> None:
        self._local.depth = self._depth() - 1
        with self._cond:
            self._active -= 1
            if not self._active and self._resizing:  # only a resize waits for none open
                self._cond.notify_all()

    def resize(self, env: lmdb.Environment, size: int) -> None:
        if self._depth():
            raise StoreError(
                "the LMDB map must be resized, but this thread has a read open on the store; "
                "do not call transact() inside read()"
            )
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            try:
                while self._active:
                    self._cond.wait()
                env.set_mapsize(size)
            except lmdb.Error as e:
                raise _store_error(e) from e
            finally:
                self._resizing = False
                self._cond.notify_all()


class _Env:
    """One LMDB environment open in this process, shared by the stores opened on its path.

    LMDB forbids opening an environment twice in one process, so a read-only
    store opened while a writer is open here uses the writer's environment.
    """

    def __init__(self, key: str, env: lmdb.Environment, dbs: dict[str, lmdb._Database]) -> None:
        self.key = key
        self.env = env
        self.dbs = dbs
        self.readonly = bool(env.flags()["readonly"])
        self.refs = 0
        self.writer = False
        self.gate = _Gate()
        self.write_lock = threading.Lock()
        self.write_thread: int | None = None
        self.decoded = _Decoded()


_OPEN: dict[str, _Env] = {}
"""Environments open in this process, by real path. ``writer`` marks the path's one writer."""
_OPEN_LOCK = threading.Lock()


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


def _open_env(key: str, *, readonly: bool, sync: bool, map_size: int) -> _Env:
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
                fmt = txn.get(_FORMAT, db=dbs["meta"])
                if fmt is None:
                    fmt = bytes([STORE_FORMAT])
                    txn.put(_FORMAT, fmt, db=dbs["meta"])
        if fmt is not None and fmt != bytes([STORE_FORMAT]):
            raise StoreError(f"context store {key} has format {fmt!r}, not {STORE_FORMAT}")
    except lmdb.NotFoundError as e:
        env.close()
        raise StoreError(f"context store {key} is not initialised yet: {e}") from e
    except lmdb.Error as e:
        env.close()
        raise StoreError(f"cannot open the context store {key}: {e}") from e
    except BaseException:
        env.close()
        raise
    return _Env(key, env, dbs)


def _abort(txn: lmdb.Transaction[bytes]) -> None:
    try:
        txn.abort()
    except lmdb.Error:
        pass  # a failed commit has already released the transaction
