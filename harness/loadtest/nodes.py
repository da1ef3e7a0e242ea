"""The load test's own multi-node cluster (``--kill-node-every``): nodes lost and returning.

:class:`TestCluster` starts a ``ray.cluster_utils.Cluster`` of *nodes* nodes on
this machine, each with its own store root (``<store>/node-<i>``, given to the
node as ``MORPHZ_STORE``: separate directories stand in for separate disks)
and connects this process to it. :class:`NodeKiller` removes a node every *S*
seconds — as a lost machine goes, its processes killed — and adds it back
(a new node id, the same disk) half a period later. The head node, which
holds Ray's GCS and the context directory, is never removed.

Ray is imported inside the functions that use it, never at module import.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["NodeKiller", "TestCluster"]


class TestCluster:
    """A cluster of *nodes* nodes on this machine under *root*, this process connected."""

    __test__ = False  # not a pytest test class

    def __init__(self, root: str, nodes: int, namespace: str) -> None:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray
        from ray.cluster_utils import Cluster

        self.root = root
        self.cluster = Cluster(
            initialize_head=True, head_node_args={"include_dashboard": False, **self.args(0)}
        )
        self.nodes: list[Any] = [self.cluster.head_node]
        for i in range(1, nodes):
            self.nodes.append(self.cluster.add_node(**self.args(i)))
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False, namespace=namespace)

    def args(self, i: int) -> dict[str, Any]:
        """``add_node`` arguments of node number *i*: one CPU, its own store root."""
        root = os.path.join(self.root, f"node-{i}")
        os.makedirs(root, exist_ok=True)
        return {"num_cpus": 1, "env_vars": {"MORPHZ_STORE": root}}

    def remove(self, i: int) -> str:
        """Remove node number *i* as a lost machine goes; its (old) node id."""
        node = self.nodes[i]
        self.cluster.remove_node(node, allow_graceful=False)
        return str(node.node_id)

    def add(self, i: int) -> str:
        """Start node number *i* again (same store root); its new node id."""
        self.nodes[i] = self.cluster.add_node(**self.args(i))
        self.cluster.wait_for_nodes()
        return str(self.nodes[i].node_id)

    def shutdown(self) -> None:
        """Disconnect and stop every node."""
        import ray

        ray.shutdown()
        self.cluster.shutdown()  # type: ignore[no-untyped-call]


class NodeKiller:
    """Every *every* seconds, removes a non-head node of *cluster*; adds it back half a
    period later.

    Ray's ``Cluster`` starts node processes from the main thread only, so the
    load's polling loop drives it: :meth:`tick` does whatever is due. Nodes are
    taken round robin (1, 2, …). Stops when told (a removed node is added back
    first), or *until* seconds after it started. ``kills`` logs ``{"node",
    "node_id", "at_s", "back_s"}`` (and ``error`` if Ray refused).
    """

    def __init__(self, cluster: TestCluster, every: float, until: float | None = None) -> None:
        self.cluster = cluster
        self.every = every
        self.until = until
        self.kills: list[dict[str, Any]] = []
        self.skipped = 0
        self.errors = 0
        self._next = 1
        self._started = time.monotonic()
        self._down: tuple[int, dict[str, Any], float] | None = None  # node, log entry, back at
        self._due = self._started + every / 2

    def start(self) -> None:
        """Start the clock (the first node goes half a period from now)."""
        self._started = time.monotonic()
        self._due = self._started + self.every / 2

    def stop(self) -> None:
        """Add back a node that is down."""
        if self._down is not None:
            self._back()

    def tick(self) -> None:
        """Remove or add back the node that is due (call it from the main thread)."""
        now = time.monotonic()
        if self._down is not None:
            if now >= self._down[2]:
                self._back()
            return
        count = len(self.cluster.nodes)
        if count < 2 or now < self._due:
            return
        if self.until is not None and now - self._started >= self.until:
            return
        i = self._next
        self._next = self._next % (count - 1) + 1
        entry: dict[str, Any] = {"context": f"node-{i}", "node": i}
        try:
            entry["node_id"] = self.cluster.remove(i)
        except Exception as e:
            self.errors += 1
            entry["error"] = f"{type(e).__name__}: {e}"
            self.kills.append(entry)
            self._due = now + self.every
            return
        entry["at_s"] = round(now - self._started, 3)
        self._down = (i, entry, now + self.every / 2)

    def _back(self) -> None:
        assert self._down is not None
        i, entry, _ = self._down
        self._down = None
        try:
            self.cluster.add(i)
        except Exception as e:
            self.errors += 1
            entry["error"] = f"{type(e).__name__}: {e}"
        now = time.monotonic()
        entry["back_s"] = round(now - self._started, 3)
        self.kills.append(entry)
        self._due = now + self.every / 2
