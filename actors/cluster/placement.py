"""Where actors run: node ids, liveness and pinning (NodeAffinity) on a Ray cluster.

A context's store is a local LMDB directory, so its actor is pinned, with a
hard node affinity, to the node that holds the directory. Everything here
imports Ray when called (through :func:`actors.client.transport.ray_module`), never at
module import.
"""

from __future__ import annotations

from typing import Any

from actors.client.transport import init_ray, ray_module
from protocol.errors import NotFound, RequestError

ACTOR_PREFIX = "ctx:"
"""Context actors are named ``ctx:<context name>`` inside their namespace."""


def actor_name(context: str) -> str:
    """The Ray actor name of the context *context*."""
    return ACTOR_PREFIX + context


def ensure_ray() -> None:
    """Connect to Ray if this process is not connected yet
    (:func:`~actors.client.transport.init_ray`: ``RAY_ADDRESS`` if set, else a new local
    cluster)."""
    init_ray()


def current_node_id() -> str:
    """The id of the node this process runs on."""
    ray = ray_module()
    ensure_ray()
    return str(ray.get_runtime_context().get_node_id())


def alive_nodes() -> list[dict[str, Any]]:
    """The live nodes of the cluster: ``{"node_id", "address", "resources"}``, by id."""
    ray = ray_module()
    ensure_ray()
    out = []
    for node in ray.nodes():
        if node.get("Alive"):
            out.append(
                {
                    "node_id": str(node["NodeID"]),
                    "address": str(node.get("NodeManagerAddress", "")),
                    "resources": dict(node.get("Resources", {})),
                }
            )
    return sorted(out, key=lambda n: n["node_id"])


def node_with_resource(resource: str) -> str:
    """The id of a live node offering the custom resource *resource*; NotFound if none."""
    for node in alive_nodes():
        if node["resources"].get(resource, 0) > 0:
            return str(node["node_id"])
    raise NotFound(f"no live node offers the resource {resource!r}")


def check_node(node_id: object) -> str:
    """Return *node_id* if it names a live node; NotFound otherwise."""
    if not isinstance(node_id, str) or not node_id:
        raise RequestError(f"a node id is a non-empty string, not {node_id!r}", code="bad_argument")
    if node_id not in {n["node_id"] for n in alive_nodes()}:
        raise NotFound(f"no live node {node_id}")
    return node_id


def pinned(node_id: str) -> Any:
    """A scheduling strategy that runs an actor on *node_id* and nowhere else."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


POLICY_SPREAD = "spread"
"""Placement policy: the live node holding the fewest context members (ties: smallest id)."""


def check_policy(policy: object) -> str:
    """*policy* if it is ``"spread"``, ``"node:<id>"`` or ``"resource:<name>"``.

    RequestError ``bad_placement`` otherwise (checked before any remote call).
    """
    if isinstance(policy, str):
        kind, _, arg = policy.partition(":")
        if policy == POLICY_SPREAD or (kind in ("node", "resource") and arg.strip() == arg != ""):
            return policy
    raise RequestError(
        f"a placement is 'spread', 'node:<node id>' or 'resource:<name>', not {policy!r}",
        code="bad_placement",
    )


def choose_nodes(
    policy: str,
    replicas: int,
    live: dict[str, dict[str, float]],
    load: dict[str, int],
) -> list[str]:
    """The primary's node then *replicas* follower nodes, all distinct (a pure rule).

    *live* maps each live node id to the resources it offers, *load* each node id
    to the context members (primaries and followers) it holds. The primary:
    ``node:<id>`` that node (NotFound if it is not live), ``resource:<r>`` the
    least-loaded live node offering *r* (NotFound if none), ``spread`` the
    least-loaded live node. Followers: the least-loaded other live nodes. Ties
    go to the smallest node id. RequestError ``not_enough_nodes`` when fewer
    than ``1 + replicas`` nodes are live.
    """
    policy = check_policy(policy)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise RequestError(
            f"replicas must be an integer >= 0, not {replicas!r}", code="bad_argument"
        )

    def by_load(nodes: list[str]) -> list[str]:
        return sorted(nodes, key=lambda n: (load.get(n, 0), n))

    kind, _, arg = policy.partition(":")
    if kind == "node":
        if arg not in live:
            raise NotFound(f"no live node {arg}")
        primary = arg
    elif kind == "resource":
        offering = [n for n, res in live.items() if res.get(arg, 0) > 0]
        if not offering:
            raise NotFound(f"no live node offers the resource {arg!r}")
        primary = by_load(offering)[0]
    else:
        if not live:
            raise NotFound("no live node")
        primary = by_load(list(live))[0]
    if 1 + replicas > len(live):
        raise RequestError(
            f"{replicas} replicas need {1 + replicas} live nodes; the cluster has {len(live)}",
            code="not_enough_nodes",
        )
    followers = by_load([n for n in live if n != primary])[:replicas]
    return [primary, *followers]
