"""Ray's nodes: their ids, which are alive, and pinning an actor to one (NodeAffinity);
:func:`start_pinned`, the one way a named actor serving a node's stores is started.

A context's store is a local LMDB directory, so its actor is pinned, with a
hard node affinity, to the node that holds the directory. Everything here
imports Ray when called (through :func:`actors.client.joining.ray_module`),
never at module import.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from actors.client.joining import init_ray, ray_module, remote_class
from protocol.errors import NotFound, RequestError

log = logging.getLogger("morphz.nodes")

RAYLET_TIMEOUT = 1.0
"""Seconds :func:`raylet_down` waits for a node's raylet to accept a connection."""


def read_stat(text: str) -> tuple[str, int]:
    """The state letter and CPU ticks (user + system) in the text of ``/proc/<pid>/stat``.

    The command name (field 2, in parentheses) may hold spaces and parentheses itself, so
    fields are counted from the last ``)``. ValueError if the text is not such a line."""
    head, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or "(" not in head or len(fields) < 13 or len(fields[0]) != 1:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    return fields[0], int(fields[11]) + int(fields[12])


def process_state(pid: object) -> tuple[str, float] | None:
    """The state letter and CPU seconds of process *pid* on this machine
    (``/proc/<pid>/stat``, :func:`read_stat`), or None if there is no
    such process. RequestError ``bad_argument`` for a pid that is not a positive integer;
    OSError where there is no ``/proc`` (not Linux)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise RequestError(f"a process id is a positive integer, not {pid!r}", code="bad_argument")
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, ticks = read_stat(text)
    return state, ticks / os.sysconf("SC_CLK_TCK")


def raylet_down(address: str, port: int) -> bool:
    """True if the raylet at *address*:*port* refuses connections or does not accept one
    within :data:`RAYLET_TIMEOUT` (Ray's node table lags a lost node by its heartbeat
    timeout); False when the address is unknown. Blocks: call it off an event loop."""
    if not address or not port:
        return False
    try:
        socket.create_connection((address, port), timeout=RAYLET_TIMEOUT).close()
    except OSError:
        return True
    return False


def stop_named(name: str, namespace: str) -> None:
    """Kill the named actor *name* of *namespace* for good (Ray does not restart it); an
    actor already gone is logged, not raised. Blocks: call it off an event loop."""
    ray = ray_module()
    try:
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    except Exception as e:  # gone already
        log.info("actor %s not stopped: %s", name, e)


def ensure_ray() -> None:
    """Connect to Ray if this process is not connected yet
    (:func:`~actors.client.joining.init_ray`: ``RAY_ADDRESS`` if set, else a new local
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


def preferring(node_id: str) -> Any:
    """A scheduling strategy that runs an actor on *node_id* while that node lives, and on
    any live node when it does not (a restart after the node's loss goes elsewhere).

    Give the actor some resource requirement (``memory=1`` will do): Ray places an actor
    that requires nothing at all on a random node, whatever a soft affinity says."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)


__all__ = [
    "alive_nodes",
    "check_lifetime",
    "check_node",
    "current_node_id",
    "ensure_ray",
    "node_with_resource",
    "pinned",
    "preferring",
    "process_state",
    "RAYLET_TIMEOUT",
    "raylet_down",
    "read_stat",
    "start_pinned",
    "stop_named",
]


def check_lifetime(lifetime: object) -> None:
    """RequestError ``bad_argument`` unless *lifetime* is None or ``"detached"``."""
    if lifetime not in (None, "detached"):
        raise RequestError("lifetime is None or 'detached'", code="bad_argument")


def start_pinned(
    cls: type,
    *,
    name: str,
    namespace: str,
    node_id: str | None,
    lifetime: str | None,
    max_concurrency: int,
    max_task_retries: int = -1,
    concurrency_groups: dict[str, int] | None = None,
) -> Any:
    """The Ray actor class of *cls* with the options every actor serving stores is started
    with: named *name* in *namespace* (got as it is if it runs already), pinned to the live
    node *node_id* (default: this node; NotFound if not live), restarted by Ray without
    limit, asking no CPU, *lifetime* ``None`` or ``"detached"``, with *concurrency_groups*
    besides Ray's default one. Call ``.remote(...)`` on it with the constructor's arguments.
    Connects to Ray first if needed."""
    check_lifetime(lifetime)
    ensure_ray()
    node = check_node(node_id) if node_id is not None else current_node_id()
    return remote_class(cls, concurrency_groups).options(
        name=name,
        namespace=namespace,
        get_if_exists=True,
        lifetime=lifetime,
        max_restarts=-1,
        max_task_retries=max_task_retries,
        max_concurrency=max_concurrency,
        num_cpus=0,
        scheduling_strategy=pinned(node),
    )
