"""Learning a node's store root without waiting for a new Ray worker where it can be helped.

A node's store root (``MORPHZ_STORE`` in that node's environment, else ``~/.morphz``
there) is known only on that node. The directory used to learn it with a Ray task pinned
to the node, once per question; a task needs a worker process of the node, and a node
starts its workers one at a time (as many at once as it has CPUs), behind every actor
being started there: at load 5 to 9 on 2 cores such a task waited more than its 30 s
bound and the placement failed. Now (:func:`learn_root`):

* one question per node is in flight at a time, shared by every caller (a placement, the
  supervisor's background learning, ``node_roots``), and a caller that stops waiting
  leaves it running, so it is answered for the next;
* the directory's own node is answered in the directory's process;
* another node is asked first through a process of this cluster already running there
  (its standby directory, an idle spare, a context's member: :func:`node_actors`), each
  within :data:`ASK_TIMEOUT`, in the same environment a task there would see;
* only when none answers is a task pinned there, awaited up to :data:`TASK_WAIT`;
* a placement learns the roots of the nodes it is about to choose before it takes the
  directory's lock (:func:`roots_for`): a question waiting for a worker no longer holds
  every other change of the directory (a promotion's record among them).

A caller waits up to :data:`~actors.cluster.directory.PROBE_TIMEOUT` and otherwise gets
``StoreError`` ``node_unreachable`` saying why. Ray is imported only when a function runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from actors.client.joining import ray_module
from actors.client.nodes import pinned
from actors.cluster.failover import POOLS
from actors.cluster.spares import is_spare

log = logging.getLogger("morphz.directory")

STORE_ENV = "MORPHZ_STORE"
"""The environment variable naming a node's store root (read on that node)."""
DEFAULT_ROOT = "~/.morphz"
"""A node's store root when nothing else names one (expanded on that node)."""
ASK_TIMEOUT = 5.0
"""Seconds one running process of a node is given to answer the node's store root (then
the next is asked, and at last a task)."""
TASK_WAIT = 300.0
"""Seconds a task pinned to a node may wait for a worker there before the question is
dropped (the next caller asks anew)."""

__all__ = [
    "ASK_TIMEOUT",
    "DEFAULT_ROOT",
    "STORE_ENV",
    "TASK_WAIT",
    "learn_root",
    "node_actors",
    "root_here",
    "roots_for",
]


def root_here(_actor: Any = None) -> str:
    """This node's store root: ``MORPHZ_STORE`` if set, else ``~/.morphz`` (absolute). Runs
    as a task, or inside any running actor (``__ray_call__``, which passes the actor)."""
    return os.path.abspath(os.path.expanduser(os.environ.get(STORE_ENV) or DEFAULT_ROOT))


def node_actors(directory: Any, node: str) -> list[str]:
    """The actors of *directory*'s namespace known to run on *node*: its standby directory,
    idle spares (by name: ``spare:<node>:…``), then the members of its entries there."""
    names: list[str] = []
    standby = getattr(directory, "standby", None)
    if standby is not None and standby[1] == node:
        names.append(standby[0])
    pool = POOLS.get(directory.namespace)
    if pool is not None:
        names += [s for s in pool.idle.get(node, []) if s in pool.ready]
    for entry in directory.entries.values():
        for m in (entry.primary, *entry.followers):
            if m.node_id == node and m.actor not in names and not is_spare(m.actor):
                names.append(m.actor)
    return names


_LEARNING: dict[tuple[str, str], asyncio.Task[str]] = {}
"""The question in flight per (namespace, node id)."""


def learn_root(directory: Any, node: str) -> asyncio.Task[str]:
    """The shared question of *node*'s store root (see the module doc): a task whose result
    is the root, recorded in *directory*'s table once found. Await it shielded."""
    key = (directory.namespace, node)
    task = _LEARNING.get(key)
    if task is None or task.done():
        task = _LEARNING[key] = asyncio.ensure_future(_learn(directory, node))
        task.add_done_callback(lambda t: _forget(key, t))
    return task


def _forget(key: tuple[str, str], task: asyncio.Task[str]) -> None:
    if _LEARNING.get(key) is task:
        del _LEARNING[key]
    if not task.cancelled() and task.exception() is not None:
        log.info("store root of node %s not learnt: %s", key[1], task.exception())


async def _learn(directory: Any, node: str) -> str:
    root = await _ask(directory, node)
    if node not in directory.roots:
        directory._put("node/" + node, root)
        directory.roots[node] = root
    return str(directory.roots[node])


async def _ask(directory: Any, node: str) -> str:
    if node == getattr(directory, "node_id", None):
        return root_here()
    ray = ray_module()
    for name in node_actors(directory, node):
        try:
            actor = await asyncio.to_thread(ray.get_actor, name, namespace=directory.namespace)
            return str(await asyncio.wait_for(actor.__ray_call__.remote(root_here), ASK_TIMEOUT))
        except Exception as e:  # gone, starting or busy: the next one, then a task
            log.info("store root of node %s: %s did not answer: %s", node, name, e)
    probe = ray.remote(num_cpus=0, scheduling_strategy=pinned(node))(root_here)
    return str(await asyncio.wait_for(probe.remote(), TASK_WAIT))


async def roots_for(directory: Any, policy: str, followers: int) -> None:
    """Learn the store roots of the nodes a placement by *policy* with *followers* would
    choose now (those not known yet), before the placement takes the directory's lock; a
    placement it cannot choose is left to the placement's own checks."""
    from actors.client.nodes import alive_nodes
    from actors.cluster.placement import choose_nodes
    from protocol.errors import MorphzError

    live = {n["node_id"]: n["resources"] for n in await asyncio.to_thread(alive_nodes)
            if n["node_id"] not in directory.down}  # fmt: skip
    load: dict[str, int] = {}
    for entry in directory.entries.values():
        for m in (entry.primary, *entry.followers):
            load[m.node_id] = load.get(m.node_id, 0) + 1
    try:
        nodes = choose_nodes(policy, followers, live, load)
    except MorphzError:
        return
    await asyncio.gather(*(directory.root_of(n) for n in nodes if n not in directory.roots))
