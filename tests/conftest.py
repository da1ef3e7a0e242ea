"""Shared fixtures: a context over each backend (real LMDB files and the in-memory store),
and one two-node local Ray cluster for the whole session (see ``tests/actors/cluster.py``).

The cluster runs on this machine: a head node and a second node offering the custom
resource ``node2``, so multi-node placement is tested without a second machine. It starts
on the first test that asks for it and stops at the end of the session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.context import Context
from storage import LmdbStore
from storage.memory import MemoryBackend
from tests.actors.cluster import NODE2, RayCluster


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

# Ray's own warnings, under ``-W error``: targeted, never a blanket ignore.
RAY_WARNINGS: tuple[str, ...] = ()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("ray") is not None:
            for spec in RAY_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """Start the session's two-node cluster and connect this process to it."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, resources={NODE2: 1})
    ray.init(address=cluster.address, log_to_driver=False, namespace="morphz-tests")
    from actors.placement import current_node_id, node_with_resource

    try:
        yield RayCluster(cluster, current_node_id(), node_with_resource(NODE2))
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


@pytest.fixture
def context_name() -> str:
    """A context name no other test of the session uses."""
    return "ctx-" + uuid.uuid4().hex[:12]


@pytest.fixture
def namespace() -> str:
    """A Ray namespace of this test alone."""
    return "morphz-" + uuid.uuid4().hex[:8]
