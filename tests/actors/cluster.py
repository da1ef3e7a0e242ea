"""What the session's Ray cluster fixture hands to tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE2 = "node2"
"""The custom resource only the second node offers."""


@dataclass(frozen=True)
class RayCluster:
    """The session's cluster and the ids of its two nodes."""

    cluster: Any
    head_node_id: str
    node2_id: str


@contextmanager
def placed_directory(ray_cluster: RayCluster, namespace: str, root: Path) -> Iterator[Any]:
    """A directory of its own *namespace* with both nodes registered (store roots
    ``root/head`` and ``root/node2``); after, every context it placed is shut down and
    every actor of the namespace stopped."""
    import ray

    from actors.client.lookup import lookup
    from actors.cluster.directory_handle import directory
    from protocol.errors import NotFound

    d = directory(namespace)
    d.register_node(ray_cluster.head_node_id, str(root / "head"))
    d.register_node(ray_cluster.node2_id, str(root / "node2"))
    try:
        yield d
    finally:
        for entry in d.list():
            try:
                lookup(entry.name, namespace).shutdown()
            except NotFound:
                pass
            d.remove(entry.name)
        ray.kill(d.actor, no_restart=True)
        for a in ray.util.list_named_actors(all_namespaces=True):
            if a["namespace"] == namespace:
                try:
                    ray.kill(ray.get_actor(a["name"], namespace=namespace), no_restart=True)
                except ValueError:  # gone meanwhile
                    pass
