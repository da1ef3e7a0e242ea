"""A store directory holding many contexts, one LMDB environment each."""

from __future__ import annotations

import os
import re
from pathlib import Path

from protocol.context import Context
from protocol.errors import NotFound, RequestError
from storage import LmdbStore

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")

DEFAULT_STORE = ".morphz"


def check_context_name(name: str) -> str:
    """Return *name* if it can name a context (letters, digits, ``._-``; at most 64)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RequestError(
            f"bad context name {name!r}: use 1-64 letters, digits, '.', '_' or '-'",
            code="bad_context_name",
        )
    return name


class Store:
    """A directory of contexts: ``<path>/<context name>/`` is one LMDB environment."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_STORE) -> None:
        self.path = Path(path)

    def context_path(self, name: str) -> Path:
        """Where the context *name* lives."""
        return self.path / check_context_name(name)

    def exists(self, name: str) -> bool:
        """True if the context *name* has been created."""
        return LmdbStore.exists(self.context_path(name))

    def open(
        self,
        name: str = "default",
        *,
        create: bool = True,
        window: int | None = None,
        readonly: bool = False,
        sync: bool = True,
    ) -> Context:
        """Open (and by default create) the context *name*; it is durable unless ``sync=False``.

        Only one process may open a context for writing at a time; a second gets
        :class:`~protocol.errors.StoreLocked`.
        """
        path = self.context_path(name)
        if not create and not LmdbStore.exists(path):
            raise NotFound(f"no context {name!r} in {self.path}")
        backend = LmdbStore.open(path, create=True, readonly=readonly, sync=sync)
        try:
            return Context(backend, window=window, name=name)
        except BaseException:
            backend.close()
            raise

    def contexts(self) -> list[str]:
        """Names of the contexts in this store, sorted."""
        if not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if LmdbStore.exists(p))


def open_context(
    store: str | os.PathLike[str] = DEFAULT_STORE,
    context: str = "default",
    **options: object,
) -> Context:
    """Open the context *context* of the store at *store*, creating both if needed."""
    return Store(store).open(context, **options)  # type: ignore[arg-type]
