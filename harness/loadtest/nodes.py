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
import threading
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
    "node_id", "at_s", "back_s", "primaries"}`` (and ``error`` if Ray refused):
    ``primaries`` has, for each context of *namespace*'s directory whose primary was on
    the removed node, its unavailability window and where the time went, as a nemesis
    fault's (:func:`harness.loadtest.nemeses.measure_window`, ``promotion_of``).
    """

    def __init__(
        self,
        cluster: TestCluster,
        every: float,
        until: float | None = None,
        namespace: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self._measuring: list[threading.Thread] = []
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
        """Add back a node that is down; wait for the windows being measured."""
        if self._down is not None:
            self._back()
        for thread in self._measuring:
            thread.join()

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
        primaries = self._primaries_on(str(self.cluster.nodes[i].node_id))
        try:
            entry["node_id"] = self.cluster.remove(i)
        except Exception as e:
            self.errors += 1
            entry["error"] = f"{type(e).__name__}: {e}"
            self.kills.append(entry)
            self._due = now + self.every
            return
        entry["at_s"] = round(now - self._started, 3)
        entry["primaries"] = []
        for name, epoch, actor in primaries:
            thread = threading.Thread(
                target=self._measure,
                args=(entry, name, epoch, actor, now, time.time()),
                daemon=True,
            )
            thread.start()
            self._measuring.append(thread)
        self._down = (i, entry, now + self.every / 2)

    def _primaries_on(self, node_id: str) -> list[tuple[str, int, str]]:
        """The contexts (name, epoch, primary's actor) of the directory whose primary is on
        *node_id*."""
        if self.namespace is None:
            return []
        from actors.cluster.directory_handle import existing_directory

        d = existing_directory(self.namespace)
        if d is None:
            return []
        return [
            (e.name, e.epoch, e.primary.actor) for e in d.list() if e.primary.node_id == node_id
        ]

    def _measure(
        self, entry: dict[str, Any], name: str, epoch: int, actor: str, at: float, wall_at: float
    ) -> None:
        """The unavailability window of context *name* whose primary (*actor*) lost its node
        at *at* (its answers do not count: it may serve until its process is killed), and
        where its time went (see :mod:`harness.loadtest.nemeses`), into *entry*."""
        from actors.cluster.directory_handle import directory
        from harness.loadtest.nemeses import WINDOW_LIMIT, measure_window, promotion_of

        assert self.namespace is not None
        window = measure_window(name, self.namespace, at, at + WINDOW_LIMIT, lost=actor)
        d = directory(self.namespace)
        found: dict[str, Any] = {
            "context": name,
            "epoch_before": epoch,
            "unavailable_s": None if window is None else round(window, 3),
        }
        found.update(promotion_of(d, name, epoch, wall_at))
        try:
            found["epoch_after"] = d.get(name).epoch
        except Exception as e:
            found["epoch_after"] = f"unknown: {type(e).__name__}"
        entry["primaries"].append(found)

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
