"""Compacting a context store: copy its LMDB environment without free pages and swap it in.

LMDB never overwrites a page a reader might still see: a record rewritten or
deleted (a forgotten text, see ``docs/forget.md``) leaves its old page on the
free list, readable in ``data.mdb`` until LMDB reuses it. :func:`compact_store`
writes a compacted copy (``env.copy(path, compact=True)``: live pages only, so
no free page survives) and replaces ``data.mdb`` with it.

It refuses (:class:`~protocol.errors.StoreLocked`, nothing changed) while a
writer holds the store — another process through ``writer.lock``, or a store
open in this process — or while another process has a read transaction open
on it: the swap must not happen under anyone's feet. It holds the writer lock
for the whole copy and swap, so no writer can start meanwhile.

Names with a leading underscore are shared between the modules of
:mod:`storage.lmdb` only; :mod:`storage.lmdb` lists the public ones.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import lmdb

from protocol.errors import NotFound, StoreError, StoreLocked
from storage.environment import OPEN, OPEN_LOCK
from storage.layout import FILE_MODE, replace_durably
from storage.lmdb.environment import _take_writer_lock
from storage.lmdb.records import _MAX_DBS

DATA_FILE = "data.mdb"


def _active_readers(env: lmdb.Environment) -> int:
    """Read transactions other processes hold open on *env* (stale slots cleared first)."""
    env.reader_check()
    listing = env.readers().strip().splitlines()
    if not listing or "no active readers" in listing[0]:
        return 0
    return max(0, len(listing) - 1)  # a header line, then one line per reader


def compact_store(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Replace the store at *path* by a compacted copy; ``{"path", "before", "after"}`` in bytes.

    NotFound if there is no store at *path*; StoreLocked if it is in use (see
    the module docstring); StoreError if LMDB or the file system fails (the
    original is kept: the copy only replaces it once complete and synced).
    """
    where = os.fspath(path)
    data = os.path.join(where, DATA_FILE)
    if not os.path.isfile(data):
        raise NotFound(f"no context store at {where}")
    key = os.path.realpath(where)
    with OPEN_LOCK:
        if key in OPEN:
            raise StoreLocked(
                f"context store {where} is open in this process; close it before compacting"
            )
        fd = _take_writer_lock(key)
        try:
            before = os.path.getsize(data)
            scratch = tempfile.mkdtemp(prefix=".compact-", dir=key)
            try:
                try:
                    env = lmdb.open(
                        key, subdir=True, readonly=False, create=False, max_dbs=_MAX_DBS, lock=True
                    )
                except lmdb.Error as e:
                    raise StoreError(f"cannot open the context store {where}: {e}") from e
                try:
                    readers = _active_readers(env)
                    if readers:
                        raise StoreLocked(
                            f"context store {where} is being read by {readers} other "
                            "transaction(s); compact it when no process has it open"
                        )
                    env.copy(scratch, compact=True)
                except lmdb.Error as e:
                    raise StoreError(f"cannot compact the context store {where}: {e}") from e
                finally:
                    env.close()
                copy = os.path.join(scratch, DATA_FILE)
                os.chmod(copy, FILE_MODE)
                replace_durably(copy, os.path.join(key, DATA_FILE))
            except OSError as e:
                raise StoreError(f"cannot compact the context store {where}: {e}") from e
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            after = os.path.getsize(os.path.join(key, DATA_FILE))
        finally:
            os.close(fd)
    return {"path": where, "before": before, "after": after}
