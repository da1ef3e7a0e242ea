"""A store directory holding many contexts, one LMDB environment each."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.context import Context
from storage import LmdbStore, check_context_name, context_path, open_context

DEFAULT_STORE = ".morphz"

__all__ = ["DEFAULT_STORE", "Store", "check_context_name", "open_context"]


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
