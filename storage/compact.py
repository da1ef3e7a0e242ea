"""Compacting a context directory: the store copied without free pages, the index dropped.

After a forget (``docs/forget.md``) the erased content may still sit on free
LMDB pages of ``data.mdb``, and its words on free pages of the search index.
:func:`compact_context` compacts the store (:func:`storage.lmdb.compact.compact_store`)
and deletes ``index/``, the lexical index: it is a rebuildable projection, and
the next search rebuilds it from the (compacted) store alone; the vector index
(``vectors/``) is compacted the same way as the store (its vectors cost
embedding work to rebuild). Refused with
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
    """Compact the context stored at *path*: ``{"path", "before", "after", "index_dropped",
    "vectors_compacted", "vectors_before", "vectors_after"}``.

    ``before``/``after`` are the sizes of ``data.mdb`` in bytes (and of the vector
    index's, when the context has one); the lexical index is dropped (rebuilt by the
    next search). NotFound if no
    store is there; StoreLocked if it is in use; StoreError if the disk fails.
    """
    from storage.search.format import INDEX_DIR
    from storage.vectors.format import VECTOR_DIR

    where = os.fspath(path)
    index = os.path.join(where, INDEX_DIR)
    vectors = os.path.join(where, VECTOR_DIR)
    for what, derived in (("search index", index), ("vector index", vectors)):
        if os.path.realpath(derived) in OPEN:  # every LMDB environment open in this process
            raise StoreLocked(
                f"the {what} of {where} is open in this process; close it before compacting"
            )
    report = compact_store(where)
    # The vector index is compacted in place (rebuilding it would re-embed everything): the
    # vectors of forgotten content, dropped by the index worker, leave its free pages too.
    vec: dict[str, Any] | None = None
    if os.path.isfile(os.path.join(vectors, "data.mdb")):
        vec = compact_store(vectors)
    dropped = False
    if os.path.isdir(index):
        try:
            shutil.rmtree(index)
        except OSError as e:
            raise StoreError(f"cannot drop the search index {index}: {e}") from e
        dropped = True
    return {
        **report,
        "index_dropped": dropped,
        "vectors_compacted": vec is not None,
        "vectors_before": None if vec is None else vec["before"],
        "vectors_after": None if vec is None else vec["after"],
    }
