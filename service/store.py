"""A store directory holding many contexts, one LMDB environment each."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.errors import NotFound
from service.context import Context
from storage import LmdbStore, check_context_name, context_path

DEFAULT_STORE = ".morphz"

__all__ = ["DEFAULT_STORE", "Store", "check_context_name", "open_context"]


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
) -> Context:
    """Open context *name* of the store at *store_dir*; durable unless ``sync=False``.

    *window*, *history_keep*, *tenant* and *project* apply when the context is
    created here; an existing context keeps its own (see ``docs/permissions.md``).

    Raises :class:`NotFound` when ``create`` is false (or ``readonly``) and the
    context does not exist, :class:`~protocol.errors.StoreLocked` when another
    process writes it and this open is not read-only. A read-only open takes no
    writer lock, so it works beside a running writer (a context actor).
    """
    path = context_path(store_dir, name)
    if (readonly or not create) and not LmdbStore.exists(path):
        raise NotFound(f"no context {name!r} in {store_dir}")
    backend = LmdbStore.open(path, create=not readonly, readonly=readonly, sync=sync)
    try:
        return Context(
            backend,
            window=window,
            history_keep=history_keep,
            name=name,
            tenant=tenant,
            project=project,
        )
    except BaseException:
        backend.close()
        raise


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
        :class:`~protocol.errors.StoreLocked`. A read-only open works beside it.
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
        return sorted(p.name for p in self.path.iterdir() if LmdbStore.exists(p))
