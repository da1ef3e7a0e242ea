"""Contexts on both nodes of the session's cluster, reached by name from agents on either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors import connect, lookup
from harness.agent_threads import run_agents, spawn_agent
from protocol.errors import RequestError
from service.admin import export_history
from tests.actors.checks import check_history, check_steps
from tests.actors.cluster import RayCluster

pytestmark = pytest.mark.ray


def test_contexts_on_two_nodes_reached_by_agents_on_either(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    import ray

    head, node2 = ray_cluster.head_node_id, ray_cluster.node2_id
    assert head != node2
    near = connect("near", store_dir=tmp_path / "head", node_id=head, namespace=namespace)
    far = connect("far", store_dir=tmp_path / "node2", node_id=node2, namespace=namespace)
    agents = [
        spawn_agent(node_id=head, namespace=namespace),
        spawn_agent(node_id=node2, namespace=namespace),
    ]
    try:
        assert near.node_id() == head and far.node_id() == node2
        assert lookup("far", namespace).node_id() == node2
        assert ray.get([a.node_id.remote() for a in agents]) == [head, node2]
        with pytest.raises(RequestError) as moved:
            connect("far", store_dir=tmp_path / "node2", node_id=head, namespace=namespace)
        assert moved.value.code == "context_elsewhere"

        def spec(context: str, first_thread: int) -> dict[str, Any]:
            return {
                "context": context,
                "namespace": namespace,
                "threads": 2,
                "first_thread": first_thread,
                "transactions": 8,
                "conflict_rate": 0.3,
                "seed": 5,
            }

        work = [
            (agents[0], spec("near", 0)),
            (agents[0], spec("far", 0)),
            (agents[1], spec("near", 2)),
            (agents[1], spec("far", 2)),
        ]
        results = run_agents(work, timeout=120)
        for handle, records in ((near, results[0] + results[2]), (far, results[1] + results[3])):
            check_history(export_history(handle), records)
            check_steps(records, threads=4, transactions=8)
            assert {r["thread"] for r in records} == {"t0", "t1", "t2", "t3"}
    finally:
        for a in agents:
            ray.kill(a)
        near.shutdown()
        far.shutdown()
