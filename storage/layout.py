"""Where contexts live: ``<store dir>/<context name>/`` is one LMDB environment."""

from __future__ import annotations

import os
import re
from pathlib import Path

from protocol.context import Context
from protocol.errors import NotFound, RequestError
from storage.lmdb_store import LmdbStore

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def check_context_name(name: object) -> str:
    """Return *name* if it can name a context (letters, digits, ``._-``; at most 64)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RequestError(
            f"bad context name {name!r}: use 1-64 letters, digits, '.', '_' or '-'",
            code="bad_context_name",
        )
    return name


def context_path(store_dir: str | os.PathLike[str], name: str) -> Path:
    """The directory of context *name* in the store at *store_dir*."""
    return Path(store_dir) / check_context_name(name)


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
