"""A node's store root learnt without a new Ray worker where a process of the cluster runs
(:mod:`actors.cluster.roots`): on the session's two-node cluster, and the shared question
with a stand-in directory (no Ray)."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from typing import Any

import pytest

from tests.actors.cluster import RayCluster

SHORT = 10.0
"""The directory's wait for a root in this test (seconds; 120 otherwise)."""


def _no_task_can_start(directory: Any, wait: float) -> bool:
    """Run in the directory (``__ray_call__``): every task it pins to a node from now on is
    infeasible (it asks for a node label no node has: it waits, as behind a node's worker
    start that never frees), and its callers wait *wait* seconds for a node's root."""
    from ray.util.scheduling_strategies import In, NodeLabelSchedulingStrategy

    from actors.cluster import directory as module

    def nowhere(_node: str) -> Any:
        return NodeLabelSchedulingStrategy({"morphz-test-no-such-label": In("none")})

    for name in ("actors.cluster.directory", "actors.cluster.roots"):
        try:
            mod = importlib.import_module(name)
        except ImportError:  # (the code before actors.cluster.roots)
            continue
        if hasattr(mod, "pinned"):
            mod.pinned = nowhere  # type: ignore[attr-defined]
    module.PROBE_TIMEOUT = wait  # type: ignore[misc]
    del directory
    return True


def test_a_nodes_root_is_learnt_without_a_new_worker_where_a_process_runs(
    ray_cluster: RayCluster, namespace: str, tmp_path: Path
) -> None:
    """No task can start anywhere (infeasible: the state of a loaded node whose worker start
    is taken, forever); the directory still learns the roots of its own node (in its own
    process) and of the second node (through a context's actor running there), so
    ``node_roots`` and a placement answer. Before, each root was a task pinned to the node,
    and both failed ``node_unreachable`` after the wait."""
    import ray

    from actors.cluster.directory_handle import directory
    from actors.cluster.placing import place
    from actors.cluster.roots import root_here

    d = directory(namespace)
    try:
        assert ray.get(d.actor.__ray_call__.remote(_no_task_can_start, SHORT), timeout=60)
        # placed with its own store directory: no root needed, and its actor runs on node 2
        ctx = place(
            "rooted",
            placement=f"node:{ray_cluster.node2_id}",
            store_dir=str(tmp_path / "given"),
            namespace=namespace,
        )
        member = ray.get_actor(d.get("rooted").primary.actor, namespace=namespace)
        there = str(ray.get(member.__ray_call__.remote(root_here), timeout=60))
        roots = d.node_roots()
        assert roots[ray_cluster.node2_id] == there, roots
        assert roots[ray_cluster.head_node_id] == root_here(), roots  # one machine here
        # a placement on the second node now needs no question at all
        assert d.place("rooted-2", policy=f"node:{ray_cluster.node2_id}").primary.store_dir == (
            there
        )
        ctx.shutdown()
    finally:
        for entry in d.list():
            d.remove(entry.name)
        ray.kill(d.actor, no_restart=True)


class _Directory:
    """What :func:`actors.cluster.roots.learn_root` and ``DirectoryActor.root_of`` use of a
    directory (no Ray)."""

    def __init__(self) -> None:
        self.namespace, self.node_id = "roots-test", "here"
        self.roots: dict[str, str] = {}
        self.entries: dict[str, Any] = {}
        self.standby = None
        self.written: list[tuple[str, str]] = []

    def _put(self, key: str, value: str) -> None:
        self.written.append((key, value))


def test_one_question_per_node_outlives_a_caller_that_stopped_waiting(monkeypatch: Any) -> None:
    """Two callers share one question; the first stops waiting after the bound with a typed
    error saying what to do, the question goes on, and the next caller gets its answer."""
    from actors.cluster import directory as module
    from actors.cluster import roots
    from actors.cluster.directory import DirectoryActor
    from protocol.errors import StoreError

    asked: list[str] = []
    answer = asyncio.Event()

    async def slow(directory: Any, node: str) -> str:
        asked.append(node)
        await answer.wait()
        return "/disk/" + node

    monkeypatch.setattr(roots, "_ask", slow)
    monkeypatch.setattr(module, "PROBE_TIMEOUT", 0.2)
    d = _Directory()

    async def run() -> None:
        first = asyncio.ensure_future(DirectoryActor.root_of(d, "n2"))  # type: ignore[arg-type]
        second = asyncio.ensure_future(DirectoryActor.root_of(d, "n2"))  # type: ignore[arg-type]
        for caller in (first, second):
            with pytest.raises(StoreError) as e:
                await caller
            assert e.value.code == "node_unreachable" and "try again" in e.value.message
        answer.set()
        await asyncio.sleep(0.05)
        assert d.roots == {"n2": "/disk/n2"} and d.written == [("node/n2", "/disk/n2")]
        assert await DirectoryActor.root_of(d, "n2") == "/disk/n2"  # type: ignore[arg-type]

    asyncio.run(run())
    assert asked == ["n2"]
    monkeypatch.undo()  # its own node: answered in its own process, nothing asked of Ray
    assert asyncio.run(roots._ask(d, "here")) == roots.root_here()
