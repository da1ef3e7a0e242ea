"""The context the index tests build on: one on real LMDB files, committed to by text."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

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


S = TypeVar("S", bound=ContextSetup)


def setup_fixture(cls: Callable[[Path], S], name: str) -> Any:
    """The pytest fixture *name*: a fresh ``cls(tmp_path)`` for each test, closed after it.
    Assign it in a test module (``s = setup_fixture(Setup, "s")``)."""

    def fixture(tmp_path: Path) -> Iterator[S]:
        setup = cls(tmp_path)
        try:
            yield setup
        finally:
            setup.close()

    return pytest.fixture(fixture, name=name)
