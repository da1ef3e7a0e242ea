"""What both outbox-derived indexes share (storage/derived.py): environments and the worker."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from protocol.errors import OutOfRange, StoreError
from protocol.view import ReadView
from storage.environment import OPEN
from storage.search import IndexWorker, LexicalIndex
from storage.vectors import FRAME_LABEL, SharedOutbox, VectorIndex
from tests.storage.contexts import ContextSetup

T = TypeVar("T")


class Flaky:
    """The real store, whose outbox reads fail while :attr:`down` is set."""

    def __init__(self, setup: ContextSetup) -> None:
        self.store = setup.backend
        self.down = False

    def read(self, fn: Callable[[ReadView], T]) -> T:
        return self.store.read(fn)

    def outbox_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        if self.down:
            raise StoreError("outbox unreadable")
        return self.store.outbox_read(after, limit)

    def outbox_ack(self, upto: int) -> None:
        self.store.outbox_ack(upto)

    def outbox_last(self) -> int:
        return self.store.outbox_last()


def test_the_two_indexes_of_a_context_keep_their_own_environments(tmp_path: Path) -> None:
    c = ContextSetup(tmp_path)
    try:
        words, vectors, again = (
            LexicalIndex.for_backend(c.backend),
            VectorIndex.for_backend(c.backend),
            LexicalIndex.for_backend(c.backend),
        )
        assert again._shared is words._shared and words._shared is not vectors._shared
        words.close()
        words.close()  # idempotent: releases one share only
        assert again.state().applied == 0
        vectors.close()
        again.close()
        # Both index environments are closed; the store's (one registry for all) is not.
        assert set(OPEN) & {str(Path(x.path).resolve()) for x in (words, vectors)} == set()
        assert str(Path(c.backend.path).resolve()) in OPEN
        with pytest.raises(StoreError, match="search index .* is closed"):
            words.state()
        with pytest.raises(StoreError, match="vector index .* is closed"):
            vectors.state()
    finally:
        c.close()


def test_a_failing_index_worker_keeps_the_error_and_recovers(tmp_path: Path) -> None:
    c = ContextSetup(tmp_path)
    index = LexicalIndex.for_backend(c.backend)
    index.catch_up()  # built: from now on intents come through the outbox reads
    source = Flaky(c)
    source.down = True
    with pytest.raises(OutOfRange):
        IndexWorker(index, source, batch=0)
    worker = IndexWorker(index, source, poll=0.01)
    try:
        c.ctx.observe("tool_result", "written while the outbox is unreadable")
        deadline = time.monotonic() + 10
        while worker.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(worker.error, StoreError) and worker.failures >= 1
        assert index.lag() == 1
        source.down = False
        assert worker.wait_for(timeout=30)
        # the pass that caught up clears the error just after the index shows no lag
        deadline = time.monotonic() + 10
        while worker.error is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.error is None and worker.failures == 0 and index.lag() == 0
        assert index.search("unreadable").hits
    finally:
        worker.stop()
        index.close()
        c.close()


TINY_MAP = 64 << 10


def test_a_tiny_map_grows_on_demand_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storage.search.index as lexical_module
    import storage.vectors.index as vector_module
    from tests.storage.test_vector_index import HashEmbedder, vector

    monkeypatch.setattr(lexical_module, "MAP_SIZE", TINY_MAP)
    monkeypatch.setattr(vector_module, "MAP_SIZE", TINY_MAP)
    c = ContextSetup(tmp_path)
    embedder = HashEmbedder(dimension=256)
    outbox = SharedOutbox(c.backend)  # acknowledged once both indexes applied
    words = LexicalIndex.open(c.backend.path, backend=outbox)
    vectors = VectorIndex.open(c.backend.path, backend=outbox)
    outbox.consumers = [words.applied, vectors.applied]
    try:
        assert words.map_size == vectors.map_size == TINY_MAP
        words.catch_up()
        vectors.catch_up(embedder)  # built while empty: what follows is applied incrementally
        for i in range(200):
            c.ctx.observe("tool_result", f"quokka report {i}: " + "lorem ipsum dolor " * 40)
        derive = " ".join(f'(derive note/{i} (note "quokka frame {i}"))' for i in range(100))
        c.commit(f"(context-tx (base-version {{base}}) {derive})")
        # One write each, far larger than the map: it grows (doubling) and runs again.
        assert words.apply_intents(limit=1000) == 201
        assert vectors.apply_intents(embedder, limit=1000) == 201
        assert words.map_size > TINY_MAP and vectors.map_size > TINY_MAP
        assert words.lag() == vectors.lag() == 0
        assert len(words.search("quokka", limit=400).hits) == 300
        state = vectors.state()
        assert state.documents == 300 and state.next_frame - FRAME_LABEL == 100
        q = vector("quokka frame 42", 256)
        assert vectors.search(q, limit=1).hits[0].id == "note/42"
        # Each frame got one label, once (the retried write did not assign them twice).
        assert len(vectors.search(q, limit=1000).hits) == 300
    finally:
        words.close()
        vectors.close()
    # Reopened with the tiny initial map, the environments take their data's size.
    words = LexicalIndex.open(c.backend.path, backend=outbox)
    vectors = VectorIndex.open(c.backend.path, backend=outbox)
    outbox.consumers = [words.applied, vectors.applied]
    try:
        assert len(words.search("quokka", limit=400).hits) == 300
        assert vectors.state().documents == 300
        c.ctx.observe("tool_result", "quokka after reopening " + "sit amet " * 2000)
        words.catch_up()
        vectors.catch_up(embedder)
        assert len(words.search("quokka", limit=400).hits) == 301
        assert vectors.state().documents == 301
    finally:
        words.close()
        vectors.close()
        c.close()


def test_three_hundred_index_environments_open_in_one_process(tmp_path: Path) -> None:
    opened: list[LexicalIndex | VectorIndex] = []
    try:
        for i in range(150):
            opened.append(LexicalIndex.open(tmp_path / f"c{i}"))
            opened.append(VectorIndex.open(tmp_path / f"c{i}"))
        assert len({id(x._shared) for x in opened}) == 300
        assert all(x.state().applied == 0 for x in opened)
    finally:
        for x in opened:
            x.close()


CHILD_GROWS_THE_MAP = """
import sys
from storage.lmdb import LmdbStore
from storage.vectors import VectorIndex
from tests.storage.test_vector_index import HashEmbedder

store = LmdbStore.open(sys.argv[1], readonly=True)
with VectorIndex.open(store.path, backend=store) as index:
    index.catch_up(HashEmbedder(dimension=256))
    print(index.state().documents, index.map_size, flush=True)
store.close()
"""


def test_a_map_grown_by_another_process_is_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import subprocess
    import sys

    import storage.vectors.index as vector_module

    monkeypatch.setattr(vector_module, "MAP_SIZE", TINY_MAP)
    c = ContextSetup(tmp_path)
    vectors = VectorIndex.for_backend(c.backend)
    try:
        assert vectors.state().documents == 0 and vectors.map_size == TINY_MAP
        for i in range(300):
            c.ctx.observe("tool_result", f"wombat note {i}")
        root = Path(__file__).resolve().parents[2]
        child = subprocess.run(
            [sys.executable, "-c", CHILD_GROWS_THE_MAP, c.backend.path],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
            timeout=120,
        )
        assert child.returncode == 0, child.stderr
        documents, size = map(int, child.stdout.split())
        assert documents == 300 and size > TINY_MAP
        # This process's map is still tiny: its next read adopts the child's size.
        assert vectors.state().documents == 300
        assert vectors.map_size >= size
    finally:
        vectors.close()
        c.close()
