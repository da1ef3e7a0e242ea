"""An LMDB environment open in this process: the gate, the retried reads and writes, map growth.

The context store (:mod:`storage.lmdb`) and the indexes derived from its outbox
(:mod:`storage.derived`: the lexical and the vector index) all keep their data in
LMDB environments, and all need the same four things, defined here once:

- **one environment per directory and process** (LMDB forbids opening one twice):
  :data:`OPEN`, guarded by :data:`OPEN_LOCK`, holds every :class:`Environment` open in
  this process by real path; handles share it by reference count (:meth:`Environment.release`);
- **the gate**: ``set_mapsize`` remaps the file and must run with no transaction open in
  the process, so every transaction enters and leaves the gate, and a resize waits for
  the open ones to end while holding new ones off. A thread that already holds a
  transaction is never held off (nested reads cannot deadlock); such a thread may not
  resize (it would wait for itself) and gets a :class:`StoreError` instead;
- **retries**: a read or a write that finds the map grown by another process adopts its
  size and runs again; a write that fills the map (``lmdb.MapFullError``, or
  :class:`MapFull` raised by a view that saw it) is aborted, the map doubled, and the
  write run again from the start;
- **map growth**: the map starts at :data:`DEFAULT_MAP_SIZE` and never grows past
  its ceiling (:data:`MAX_MAP_SIZE`, or :data:`MAX_MAP_ENV` bytes when set, or the
  environment's own), so hundreds of environments fit in one address space;
- **a full store**: a write that would grow the map past its ceiling, or whose commit
  fails while the filesystem holding it is (nearly) full, raises
  :class:`~protocol.errors.StoreFull` (code ``store_full``): the transaction was
  aborted, nothing of it applied; reads go on, and the next write succeeds once there
  is room again (LMDB's last committed state is untouched by a failed commit).

Every LMDB failure leaves as :class:`~protocol.errors.StoreError` (:meth:`Environment.error`).
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import lmdb

from protocol.errors import StoreError, StoreFull

T = TypeVar("T")

DEFAULT_MAP_SIZE = 64 << 20
"""The map a new environment opens with (64 MiB); it doubles whenever a write fills it."""
MAX_MAP_SIZE = 1 << 44 if sys.maxsize > 1 << 32 else 1 << 31
"""A map never grows past this (16 TiB; 2 GiB in a 32-bit process); a write that would
need more fails."""
MAX_MAP_ENV = "MORPHZ_MAX_MAP_SIZE"
"""The environment variable that lowers the ceiling of every map opened by this process
(bytes): a quota per store, beyond which writes fail with ``store_full``."""
FULL_DISK_FREE = 4 << 20
"""A commit that fails with an I/O error while its filesystem has less than this free
(4 MiB) failed for want of room: ``store_full``, not a disk fault."""


def max_map_size() -> int:
    """The ceiling of a new environment's map: :data:`MAX_MAP_ENV` when set, else
    :data:`MAX_MAP_SIZE` (a malformed value is ignored: the ceiling is a limit, and no
    limit is what the store had before)."""
    value = os.environ.get(MAX_MAP_ENV, "")
    try:
        size = int(value)
    except ValueError:
        return MAX_MAP_SIZE
    return min(size, MAX_MAP_SIZE) if size > 0 else MAX_MAP_SIZE


def free_bytes(path: str) -> int | None:
    """Bytes free to this process on the filesystem holding *path* (None if unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class MapFull(StoreError):
    """Raised inside a write when the map is full: the write is aborted and run again on a
    doubled map (:meth:`Environment.write`)."""


class _Retry(enum.Enum):
    GROW = "grow"  # the map is full: double it and run the write again
    ADOPT = "adopt"  # another process grew the map: take its size and run again


def abort(txn: lmdb.Transaction[bytes]) -> None:
    """Abort *txn*, ignoring that a failed commit has already released it."""
    try:
        txn.abort()
    except lmdb.Error:
        pass


class Environment:
    """One LMDB environment open in this process, shared by every handle on its directory.

    *what* names it in every error (``"context store"``, ``"search index"`` ...).
    :meth:`read` and :meth:`write` run a callback on one transaction with the gate,
    the retries and the map growth; writes are serialized (:attr:`write_lock`) and
    cannot nest.
    """

    def __init__(
        self,
        key: str,
        env: lmdb.Environment,
        dbs: dict[str, lmdb._Database],
        what: str,
        max_size: int | None = None,
    ) -> None:
        self.key = key
        self.max_size = max_map_size() if max_size is None else max_size
        """The ceiling the map never grows past: a write needing more is ``store_full``."""
        self.env = env
        self.dbs = dbs
        self.what = what
        self.refs = 0
        self.write_lock = threading.Lock()
        self.write_thread: int | None = None
        self._cond = threading.Condition()
        self._active = 0  # transactions open on the environment in this process
        self._resizing = False
        self._local = threading.local()

    # -- errors ---------------------------------------------------------------------------

    def error(self, e: lmdb.Error, doing: str) -> StoreError:
        """The :class:`StoreError` an LMDB failure while *doing* (``read``, ``write``)
        becomes: :class:`StoreFull` for a failed write on a (nearly) full filesystem."""
        if doing == "write":
            free = free_bytes(self.key)
            if free is not None and free < FULL_DISK_FREE:
                return StoreFull(
                    f"{self.what} {self.key}: no room to write ({free:,} bytes free on its"
                    f" filesystem): {e}"
                )
        return StoreError(f"{self.what} {doing} failed: {e}")

    # -- the gate -------------------------------------------------------------------------

    def _depth(self) -> int:
        depth: int = getattr(self._local, "depth", 0)
        return depth

    def enter(self) -> None:
        """Count a transaction about to open; held off while the map is being resized
        (unless this thread already has one open)."""
        depth = self._depth()
        with self._cond:
            while self._resizing and not depth:
                self._cond.wait()
            self._active += 1
        self._local.depth = depth + 1

    def leave(self) -> None:
        """Count a transaction closed."""
        self._local.depth = self._depth() - 1
        with self._cond:
            self._active -= 1
            if not self._active and self._resizing:  # only a resize waits for none open
                self._cond.notify_all()

    def resize(self, size: int) -> None:
        """Set the map to *size* bytes (0: adopt the size another process set), once no
        transaction is open on the environment in this process."""
        if self._depth():
            raise StoreError(
                f"the {self.what} map must grow, but this thread has a read open on it;"
                " do not write inside a read (transact() inside read())"
            )
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            try:
                while self._active:
                    self._cond.wait()
                self.env.set_mapsize(size)
            except lmdb.Error as e:
                raise StoreError(f"cannot resize the {self.what} map: {e}") from e
            finally:
                self._resizing = False
                self._cond.notify_all()

    @property
    def map_size(self) -> int:
        """The current size of the map, in bytes."""
        return int(self.env.info()["map_size"])

    # -- reads and writes -----------------------------------------------------------------

    def read(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        """Run *fn* in a read transaction (after adopting a map another process grew).

        A full map raised inside *fn* passes through untranslated: a read never fills
        a map, so it belongs to a write around this read (an index write reading the
        store), whose retry grows its own map.
        """
        while True:
            self.enter()
            try:
                try:
                    txn = self.env.begin()
                except lmdb.MapResizedError:
                    pass  # adopt the other process's size below, then run again
                else:
                    try:
                        return fn(txn)
                    finally:
                        abort(txn)
            except lmdb.MapFullError:
                raise
            except lmdb.Error as e:
                raise self.error(e, "read") from e
            finally:
                self.leave()
            self.resize(0)

    def write(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        """Run *fn* in one write transaction: commit if it returns, abort if it raises.

        If the map fills up, the transaction is aborted, the map doubled and *fn* run
        again from the start, so *fn* must have no effect outside the transaction (or
        undo it when it starts). Writes cannot nest: :class:`StoreError` if they do.
        """
        me = threading.get_ident()
        if self.write_thread == me:
            raise StoreError("transact() cannot be nested")
        with self.write_lock:
            self.write_thread = me
            try:
                while True:
                    outcome = self._attempt(fn)
                    if not isinstance(outcome, _Retry):
                        return outcome
                    size = 0  # adopt the size another process set
                    if outcome is _Retry.GROW:
                        current = self.map_size
                        size = min(current * 2, self.max_size)
                        if size <= current:
                            raise StoreFull(
                                f"the {self.what} {self.key} is full: its map is at its"
                                f" ceiling ({self.max_size:,} bytes)"
                            )
                    self.resize(size)
            finally:
                self.write_thread = None

    def _attempt(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T | _Retry:
        self.enter()
        try:
            try:
                txn = self.env.begin(write=True)
            except lmdb.MapResizedError:
                return _Retry.ADOPT
            except lmdb.Error as e:
                raise self.error(e, "write") from e
            try:
                result = fn(txn)
                txn.commit()
            except BaseException as e:
                abort(txn)
                if isinstance(e, lmdb.MapFullError | MapFull):
                    return _Retry.GROW
                if isinstance(e, lmdb.Error):
                    raise self.error(e, "write") from e
                raise
            return result
        finally:
            self.leave()

    # -- sharing --------------------------------------------------------------------------

    def release(self) -> None:
        """Give up one handle's share; the last one closes the environment. Call with
        :data:`OPEN_LOCK` held."""
        self.refs -= 1
        if self.refs == 0:
            del OPEN[self.key]
            self.close()

    def close(self) -> None:
        """Close the environment (its last handle was released)."""
        self.env.close()


OPEN: dict[str, Environment] = {}
"""Every LMDB environment open in this process (stores and indexes), by real path."""
OPEN_LOCK = threading.Lock()
"""Guards :data:`OPEN` and the reference counts."""
