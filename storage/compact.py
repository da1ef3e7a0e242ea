"""Compacting a context directory: the store copied without free pages, the index dropped.

After a forget (``docs/forget.md``) the erased content may still sit on free
LMDB pages of ``data.mdb``, and its words on free pages of the search index.
:func:`compact_context` compacts the store (:func:`storage.lmdb.compact.compact_store`)
and deletes ``index/``, the lexical index: it is a rebuildable projection, and
the next search rebuilds it from the (compacted) store alone. Refused with
:class:`~protocol.errors.StoreLocked`, nothing changed, while the store is in
use (a writer anywhere, a reader in another process, or the store or its index
open in this process).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from protocol.errors import StoreError, StoreLocked
from storage.environment import OPEN
from storage.lmdb.compact import compact_store


def compact_context(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Compact the context stored at *path*: ``{"path", "before", "after", "index_dropped"}``.

    ``before``/``after`` are the sizes of ``data.mdb`` in bytes. NotFound if no
    store is there; StoreLocked if it is in use; StoreError if the disk fails.
    """
    from storage.search.format import INDEX_DIR

    where = os.fspath(path)
    index = os.path.join(where, INDEX_DIR)
    if os.path.realpath(index) in OPEN:  # every LMDB environment open in this process
        raise StoreLocked(
            f"the search index of {where} is open in this process; close it before compacting"
        )
    report = compact_store(where)
    dropped = False
    if os.path.isdir(index):
        try:
            shutil.rmtree(index)
        except OSError as e:
            raise StoreError(f"cannot drop the search index {index}: {e}") from e
        dropped = True
    return {**report, "index_dropped": dropped}
