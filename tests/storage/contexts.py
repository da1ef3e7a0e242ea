"""The context the index tests build on: one on real LMDB files, committed to by text."""

from __future__ import annotations

from pathlib import Path

from service.context import Context
from service.store import Store
from storage.lmdb import LmdbStore


class ContextSetup:
    """A context named *name* under *root* (no fsync: the tests never crash the machine).

    Subclasses open their indexes on :attr:`backend` and close them before
    calling :meth:`close`.
    """

    def __init__(self, root: Path, name: str = "c") -> None:
        self.root = root
        self.store = Store(root)
        self.ctx: Context = self.store.open(name, sync=False)
        assert isinstance(self.ctx.backend, LmdbStore)
        self.backend: LmdbStore = self.ctx.backend

    def commit(self, tx: str) -> None:
        """Commit *tx*, its ``{base}`` replaced by the context's version; it must commit."""
        receipt = self.ctx.commit(tx.replace("{base}", str(self.ctx.version())))
        assert receipt.committed, receipt.to_dict()

    def close(self) -> None:
        self.ctx.close()
