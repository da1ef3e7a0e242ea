"""A store directory holding many contexts, one LMDB environment each.

The rules a port must not re-implement live here: an open that may not create
(a read, or a write without ``create``) raises :class:`NotFound` naming the
contexts that exist and how to make one; :meth:`Store.contexts_info` lists a
store's contexts with their counters and size on disk; :meth:`Store.drop`
deletes one, refused with :class:`StoreLocked` while a writer holds it;
:meth:`Store.fork` builds a fork aside and renames it into place, so a failed
fork leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from protocol.errors import NotFound, RequestError, StoreError
from protocol.suggest import did_you_mean
from protocol.view import ReadView
from service.context import Context
from service.fork import ASIDE
from storage import LmdbStore, check_context_name, context_path

DEFAULT_STORE = ".morphz"

__all__ = [
    "DEFAULT_STORE",
    "ContextInfo",
    "Store",
    "check_context_name",
    "missing_context",
    "open_context",
]

_ASIDE = ASIDE


def missing_context(store_dir: str | os.PathLike[str], name: str) -> NotFound:
    """The :class:`NotFound` for context *name* missing from *store_dir*.

    It names the contexts the store holds (or says there is no store there) and
    how to create one, so a mistyped ``--store`` or ``--context`` is never
    mistaken for lost memory.
    """
    where = os.fspath(store_dir)
    hint = ""
    if not os.path.isdir(where):
        held = f"there is no store at {where}"
    else:
        names = Store(where).contexts()
        hint = did_you_mean(name, names)
        held = (
            f"the store {where} holds " + ", ".join(names)
            if names
            else f"the store {where} holds no context"
        )
    return NotFound(
        f"no context {name!r}: " + (f"{hint} " if hint else "") + f"{held}; "
        f"create it with `morphz init --context {name}` "
        "(or a write with --create; open_context(..., create=True) in Python)"
    )


def open_context(
    store_dir: str | os.PathLike[str],
    name: str,
    *,
    window: int | None = None,
    history_keep: int | None = None,
    create: bool = True,
    readonly: bool = False,
    sync: bool = True,
    tenant: str | None = None,
    project: str | None = None,
    embedder: Any = None,
) -> Context:
    """Open context *name* of the store at *store_dir*; durable unless ``sync=False``.

    *embedder* (a :class:`adapters.embeddings.EmbedderConfig` or an
    :class:`~storage.embeddings.Embedder`) makes search hybrid (docs/search.md).

    *window*, *history_keep*, *tenant* and *project* apply when the context is
    created here; an existing context keeps its own (see ``docs/permissions.md``).

    Raises :class:`NotFound` (see :func:`missing_context`) when ``create`` is
    false (or ``readonly``) and the context does not exist: a read never
    creates. :class:`~protocol.errors.StoreLocked` when another process writes
    it and this open is not read-only. A read-only open takes no writer lock,
    so it works beside a running writer (a context actor).
    """
    path = context_path(store_dir, name)
    existed = LmdbStore.exists(path)
    if (readonly or not create) and not existed:
        raise missing_context(store_dir, name)
    backend = LmdbStore.open(path, create=create and not readonly, readonly=readonly, sync=sync)
    try:
        return Context(
            backend,
            window=window,
            history_keep=history_keep,
            name=name,
            tenant=tenant,
            project=project,
            embedder=embedder,
        )
    except BaseException:
        backend.close()
        if not existed:  # a refused creation (a bad window …) leaves no context behind
            shutil.rmtree(path, ignore_errors=True)
        raise


class ContextInfo(BaseModel):
    """One context of a store, as ``morphz contexts`` lists it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: int
    tick: int
    window: int
    frames: int
    """Frame ids the context holds, retired ones included."""
    events: int
    """Observations recorded."""
    bytes: int
    """Size on disk of the context's directory (store, lock and search index)."""


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                continue  # removed while we walked
    return total


class Store:
    """A directory of contexts: ``<path>/<context name>/`` is one LMDB environment."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_STORE) -> None:
        self.path = Path(path)

    def context_path(self, name: str) -> Path:
        """Where the context *name* lives."""
        return context_path(self.path, name)

    def exists(self, name: str) -> bool:
        """True if the context *name* has been created."""
        return LmdbStore.exists(self.context_path(name))

    def open(
        self,
        name: str = "default",
        *,
        create: bool = True,
        window: int | None = None,
        history_keep: int | None = None,
        readonly: bool = False,
        sync: bool = True,
    ) -> Context:
        """Open (and by default create) the context *name*; durable unless ``sync=False``.

        Only one process may open a context for writing at a time; a second gets
        :class:`~protocol.errors.StoreLocked`. A read-only open works beside it
        and never creates: a missing context raises :class:`NotFound`.
        """
        return open_context(
            self.path,
            name,
            window=window,
            history_keep=history_keep,
            create=create,
            readonly=readonly,
            sync=sync,
        )

    def contexts(self) -> list[str]:
        """Names of the contexts in this store, sorted."""
        if not self.path.is_dir():
            return []
        return sorted(
            p.name
            for p in self.path.iterdir()
            if not p.name.startswith(".") and LmdbStore.exists(p)
        )

    def info(self, name: str) -> ContextInfo:
        """Counters and size of context *name*, read without the writer lock.

        Raises :class:`NotFound` for a context the store does not hold.
        """

        def count(v: ReadView) -> tuple[int, int, int, int, int]:
            m = v.meta()
            frames = sum(1 for _ in v.iter_frames())
            return m.version, m.tick, m.window, frames, m.next_seq - 1

        with self.open(name, readonly=True) as ctx:
            version, tick, window, frames, events = ctx.backend.read(count)
        return ContextInfo(
            name=name,
            version=version,
            tick=tick,
            window=window,
            frames=frames,
            events=max(events, 0),
            bytes=_size(self.context_path(name)),
        )

    def contexts_info(self) -> list[ContextInfo]:
        """:meth:`info` of every context in the store, by name.

        Raises :class:`NotFound` when *path* is not a store directory at all
        (a mistyped ``--store`` must not look like an empty store).
        """
        if not self.path.is_dir():
            raise NotFound(
                f"there is no store at {self.path}; create one with `morphz init` "
                "(it makes the directory and the context 'default')"
            )
        return [self.info(n) for n in self.contexts()]

    def drop(self, name: str) -> ContextInfo:
        """Delete context *name* and everything it holds; return what it held.

        The context's writer lock is taken first: while a context actor or
        another writer holds it, this raises
        :class:`~protocol.errors.StoreLocked` and deletes nothing. Under the
        lock the directory is renamed aside (the context is gone at once, for
        every process), then removed. Raises :class:`NotFound` for a context the
        store does not hold.
        """
        info = self.info(name)
        path = self.context_path(name)
        aside = self.path / f"{_ASIDE}drop-{name}-{uuid.uuid4().hex[:12]}"
        backend = LmdbStore.open(path, create=False)  # the writer lock, or StoreLocked
        try:
            try:
                os.rename(path, aside)
            except OSError as e:
                raise StoreError(f"cannot remove the context {name!r}: {e}") from e
        finally:
            backend.close()
        shutil.rmtree(aside, ignore_errors=True)
        return info

    def fork(self, source: str, new: str, *, at_version: int | None = None) -> dict[str, object]:
        """Fork context *source* into the new context *new* as of *at_version* (R39).

        Atomic: the fork is built in a directory aside and renamed into place
        only once complete, so a failed fork (``out_of_range``, ``not_found``,
        a replay failure, an interrupted process) leaves no context *new*
        behind and a retry can succeed. Raises :class:`RequestError` code
        ``exists`` if *new* exists. Returns what
        :func:`service.fork.fork_into` returns, with ``context`` set to *new*.
        """
        from service.fork import fork_store

        check_context_name(new)
        if self.exists(new):
            raise RequestError(f"context {new!r} already exists", code="exists")
        if not self.exists(source):
            raise missing_context(self.path, source)
        return fork_store(self.path, source, new, at_version=at_version)
