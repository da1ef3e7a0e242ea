"""An index derived from a context's outbox, kept in an LMDB environment of its own.

The lexical index (:mod:`storage.search.index`) and the vector index
(:mod:`storage.vectors.index`) are both projections of a context's durable
records: every commit and observation appends an intent to the context's
outbox (:class:`IntentSource`) in the same write, and the index applies the
intents in its own environment, then acknowledges them (:func:`ack`). What they
share lives here:

- :class:`DerivedIndex`: a handle on an index environment, shared by reference
  count between the handles on one directory, with the gate, the retried reads
  and writes and the map growth of every LMDB environment of the project
  (:class:`storage.environment.Environment`: the map starts at
  :data:`~storage.environment.DEFAULT_MAP_SIZE` and doubles whenever a write
  fills it; a map another process grew is adopted), so hundreds of indexes can
  be open in one process; :func:`open_env` opens one with its named databases;
- :class:`OutboxWorker`: the background thread that applies intents as they
  come, keeps an error for its owner, backs off while failing, and lets a
  caller wait until what was written before is applied.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import lmdb

from protocol.errors import OutOfRange, RequestError, StoreError
from protocol.view import ReadView
from storage.environment import OPEN, OPEN_LOCK, Environment
from storage.layout import DIR_MODE

T = TypeVar("T")


class IntentSource(Protocol):
    """What an index needs of a context store: snapshot reads and its outbox."""

    def read(self, fn: Callable[[ReadView], T]) -> T:
        """Run *fn* against one consistent snapshot."""

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* index intents numbered above *after*, oldest first."""

    def outbox_ack(self, upto: int) -> None:
        """Delete the intents numbered *upto* and below."""

    def outbox_last(self) -> int:
        """The number of the newest intent ever appended; 0 if none."""


def ack(source: IntentSource, upto: int) -> None:
    """Acknowledge the intents up to *upto*, unless there are none or the store is read-only."""
    if upto <= 0 or getattr(source, "readonly", False):
        return
    source.outbox_ack(upto)


E = TypeVar("E", bound=Environment)


def open_env(
    path: str,
    names: Sequence[str],
    what: str,
    map_size: int,
    factory: Callable[[str, lmdb.Environment, dict[str, lmdb._Database], str], E],
) -> E:
    """Open the environment at *path* with the named databases *names*; ``StoreError`` if not.

    *map_size* is the initial map (it grows on demand); an environment whose
    data is already larger opens with its own size.
    """
    try:
        os.makedirs(path, DIR_MODE, exist_ok=True)
        env = lmdb.open(
            path,
            mode=DIR_MODE,  # the directory 0700, data and lock files 0600
            map_size=map_size,
            subdir=True,
            max_dbs=len(names) + 1,
            sync=True,
            metasync=True,
            readahead=False,
        )
    except (OSError, lmdb.Error) as e:
        raise StoreError(f"cannot open the {what} {path}: {e}") from e
    try:
        with env.begin(write=True) as txn:
            dbs = {name: env.open_db(name.encode(), txn=txn) for name in names}
    except lmdb.Error as e:
        env.close()
        raise StoreError(f"cannot open the {what} {path}: {e}") from e
    return factory(path, env, dbs, what)


class DerivedIndex(Generic[E]):
    """A handle on an index in ``<context dir>/<subdirectory>``; the base of both indexes.

    Subclasses name themselves (:attr:`WHAT`, used in every error) and say how
    their environment opens (:meth:`_open_shared`). Handles on one directory
    share one :class:`~storage.environment.Environment`; :meth:`close` releases
    this handle's share and closes the environment with the last one. Idempotent.
    """

    WHAT: ClassVar[str] = "index"

    def __init__(self, shared: E, path: str, backend: IntentSource | None) -> None:
        """Use the subclass's ``open`` or ``for_backend``."""
        self._shared = shared
        self._path = path
        self._backend = backend
        self._closed = False

    @classmethod
    def _open_shared(cls, key: str) -> E:
        """Open the environment at the real path *key* (the first handle on it)."""
        raise NotImplementedError

    @classmethod
    def _acquire(cls, path: str) -> E:
        """This process's environment at *path*, opened if no handle has it yet."""
        key = os.path.realpath(path)
        with OPEN_LOCK:
            shared = OPEN.get(key)
            if shared is None:
                shared = cls._open_shared(key)
                OPEN[key] = shared
            elif shared.what != cls.WHAT:
                raise StoreError(f"{path} is open here as a {shared.what}, not a {cls.WHAT}")
            shared.refs += 1
        return shared  # type: ignore[return-value]  # one class per directory

    @classmethod
    def _backend_dir(cls, backend: Any) -> str:
        """The directory of the context whose store is *backend*."""
        path = getattr(backend, "path", None)
        if not isinstance(path, str):
            raise StoreError(f"the {cls.WHAT} needs a context stored in a directory")
        return path

    @property
    def path(self) -> str:
        """The index directory."""
        return self._path

    def close(self) -> None:
        """Release the index environment. Idempotent."""
        with OPEN_LOCK:
            if self._closed:
                return
            self._closed = True
            self._shared.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _env(self) -> E:
        if self._closed:
            raise StoreError(f"{self.WHAT} {self._path} is closed")
        return self._shared

    def _source(self, backend: IntentSource | None) -> IntentSource:
        source = backend if backend is not None else self._backend
        if source is None:
            raise RequestError(f"no context store given to the {self.WHAT}", code="no_backend")
        return source

    @property
    def map_size(self) -> int:
        """The current size of the environment's map, in bytes."""
        return self._env().map_size

    def _read(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        """Run *fn* in a read transaction (after adopting a map another process grew)."""
        return self._env().read(fn)

    def _write(self, fn: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        """Run *fn* in one write transaction: commit if it returns, abort if it raises.

        If the map fills up, the transaction is aborted, the map doubled and
        *fn* run again from the start, so *fn* must undo any effect it had
        outside the transaction when it starts.
        """
        return self._env().write(fn)


class OutboxWorker:
    """A background thread that applies a context's outbox intents to an index.

    Subclasses give the step (:meth:`_step`: apply up to :attr:`batch` intents,
    return how many, 0 when idle) and the caught-up test (:meth:`_caught_up`).
    The thread polls every *poll* seconds when idle (:meth:`notify` wakes it at
    once). A failing step is kept in :attr:`error` (cleared by the next success;
    :attr:`failures` counts the failures in a row) and retried after a pause
    of ``poll * 10 * 2**failures``, at most *max_pause*; it never kills the
    thread. Stop the worker before closing the index or the context.
    """

    def __init__(
        self,
        backend: IntentSource,
        *,
        batch: int,
        poll: float,
        max_pause: float,
        name: str,
        start: bool,
    ) -> None:
        if batch < 1:
            raise OutOfRange(f"batch must be at least 1, not {batch}")
        if not 0 < poll <= 60:
            raise OutOfRange(f"poll must be between 0 and 60 seconds, not {poll}")
        self.backend = backend
        self.batch = batch
        self.poll = poll
        self.max_pause = max_pause
        self.error: BaseException | None = None
        self.failures = 0
        self._cond = threading.Condition()
        self._wake = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if start:
            self.start()

    def _step(self) -> int:
        """Apply up to :attr:`batch` pending intents; return how many (0: nothing to do)."""
        raise NotImplementedError

    def _caught_up(self, target: int, version: int | None) -> bool:
        """True once intents up to *target* (and context *version*, if given) are applied."""
        raise NotImplementedError

    def start(self) -> None:
        """Start the thread (done by the constructor unless ``start=False``)."""
        if not self._thread.is_alive():
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
            try:
                n = self._step()
                self.error, self.failures = None, 0
            except Exception as e:  # noqa: BLE001 - kept for the owner; the worker goes on
                self.error = e
                self.failures += 1
                n = 0
            with self._cond:
                self._cond.notify_all()
                if n == 0 and not self._stop:
                    pause = self.poll
                    if self.error is not None:
                        pause = min(self.max_pause, self.poll * 10 * 2 ** min(self.failures, 10))
                    if not self._wake:
                        self._cond.wait(pause)
                    self._wake = False

    def notify(self) -> None:
        """Wake the worker now (there are new intents)."""
        with self._cond:
            self._wake = True
            self._cond.notify_all()

    def wait_for(self, version: int | None = None, timeout: float = 5.0) -> bool:
        """Block until everything written before this call is applied; False on timeout.

        With *version*, also wait until the index reflects that context version.
        A failing worker is not hurried: it retries after its pause.
        """
        target = self.backend.outbox_last()
        deadline = time.monotonic() + timeout
        while True:
            if self._caught_up(target, version):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self._thread.is_alive():
                return False
            with self._cond:
                if self.error is None:
                    self._wake = True
                    self._cond.notify_all()
                self._cond.wait(min(left, self.poll))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after its current step."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
