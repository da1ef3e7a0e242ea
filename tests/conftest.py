"""Shared fixtures: a context over each backend (real LMDB files and the in-memory store)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.context import Context
from protocol.memory import MemoryBackend
from storage import LmdbStore


@pytest.fixture(params=["lmdb", "memory"])
def make_ctx(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A factory of fresh contexts: ``make_ctx(window=8)``; closed after the test."""
    opened: list[Context] = []
    counter = iter(range(1_000_000))

    def make(window: int | None = None) -> Context:
        if request.param == "lmdb":
            backend: object = LmdbStore.open(tmp_path / f"ctx{next(counter)}", sync=False)
        else:
            backend = MemoryBackend()
        ctx = Context(backend, window=window)  # type: ignore[arg-type]
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


@pytest.fixture
def ctx(make_ctx: object) -> Context:
    """A fresh context with the default window of 8 ticks."""
    return make_ctx()  # type: ignore[operator,no-any-return]
