"""The load test's hold on the Ray cluster: connecting, placing the contexts over every node
through the context directory, this machine's nodes, the context killer.

Ray is imported inside the functions that use it, never at module import.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.joining import init_ray
from actors.client.nodes import alive_nodes, current_node_id
from actors.cluster.directory_handle import directory
from actors.cluster.placing import place
from protocol.errors import MorphzError, NotFound


class Killer:
    """SIGKILLs one context actor's process every *every* seconds, round robin, from a thread.

    An actor that started less than *every* seconds ago (it came back from the last kill)
    is left to serve until it is *every* seconds old before it is killed: a restart slower
    than the interval (a loaded machine starts a worker in seconds) must not keep a
    context from ever committing. It stops when told, or *until* seconds after it started
    (the load's duration).
    """

    def __init__(
        self,
        handles: list[ContextHandle],
        every: float,
        local: set[str],
        seed: int,
        until: float | None = None,
    ) -> None:
        self.handles = handles
        self.every = every
        self.until = until
        self.local = local
        self.kills: list[dict[str, Any]] = []
        self.skipped = 0
        self.errors = 0
        self._stop = threading.Event()
        self._next = random.Random(f"{seed}:killer").randrange(len(handles))
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="morphz-killer", daemon=True)

    def start(self) -> None:
        """Start killing (the clock of *until* starts now)."""
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop killing and wait for the killer's thread to end."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            if self.until is not None and time.monotonic() - self._started >= self.until:
                return
            handle = self.handles[self._next % len(self.handles)]
            self._next += 1
            info = self._serving(handle)
            if info is None:
                continue
            pid, node = int(info["pid"]), str(info["node_id"])
            if self._stop.is_set():
                return
            if node not in self.local or pid == os.getpid() or not is_actor_process(pid):
                self.skipped += 1
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                self.errors += 1
                continue
            self.kills.append(
                {
                    "context": handle.name,
                    "pid": pid,
                    "at_s": round(time.monotonic() - self._started, 3),
                    "age_s": round(time.time() - float(info.get("started_at") or 0.0), 3),
                }
            )


    def _serving(self, handle: ContextHandle) -> dict[str, Any] | None:
        """The actor's ``describe`` once its process is at least *every* seconds old (its
        ``started_at``, this machine's clock: only local actors are killed); None when it
        cannot be asked or the killer is told to stop meanwhile."""
        for _ in range(3):
            try:
                info = handle.describe()  # waits for a restarting actor
            except MorphzError:
                self.errors += 1
                return None
            age = time.time() - float(info.get("started_at") or 0.0)
            if age >= self.every:
                break
            if self._stop.wait(self.every - age):
                return None
        return info


def is_actor_process(pid: int) -> bool:
    """Whether *pid* is a Ray worker process on this machine (its command line says so)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return not os.path.isdir("/proc")  # no procfs: trust the node check alone
    return b"ray::" in cmdline or b"default_worker" in cmdline


def local_nodes() -> list[str]:
    """The live nodes on this machine (same IP address as this process), this node first."""
    import ray

    here = current_node_id()
    try:
        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # a client-mode driver has no local node address
        return [here]
    same = [n["node_id"] for n in alive_nodes() if n["address"] == ip]
    if here not in same:
        return same or [here]
    return [here] + [n for n in same if n != here]


def connect_ray(address: str | None) -> bool:
    """Connect this process to Ray unless it is connected; True if this call connected it.

    :func:`actors.client.joining.init_ray`: *address*, else ``RAY_ADDRESS``, else a
    new local cluster; ``TransportError`` ``ray_unreachable`` if it cannot be joined.
    """
    return init_ray(address)


def place_contexts(
    names: list[str], store: str | None, namespace: str, followers: int = 0
) -> list[tuple[ContextHandle, str]]:
    """Start each context where the context directory places it; its handle and node id.

    The policy is ``spread`` (the live node holding the fewest context members,
    ties to the smallest id), so *names* go round the live nodes, every node
    of the cluster and not only this machine's. Each store is ``<store>/<name>``
    on its node (*store* is a path valid on every node), or, with *store* None,
    under each node's own store root (docs/cluster.md); *followers* followers
    each (the replication module starts them). The actors are not detached:
    they end with this process, as the run's other actors do.
    """
    placed = []
    for name in names:
        handle = place(
            name, followers=followers, store_dir=store, namespace=namespace, lifetime=None
        )
        placed.append((handle, directory(namespace).get(name).primary.node_id))
    return placed


def forget_contexts(names: list[str], namespace: str) -> None:
    """Remove the run's contexts from the directory (their stores stay where they are).

    A directory left empty is stopped (its state is in the GCS, so nothing is
    lost: the next placement starts it again), so runs leave no actor behind.
    """
    known = directory(namespace)
    for name in names:
        try:
            known.remove(name)
        except NotFound:
            pass
    if not known.list():
        known.transport.kill()  # waits until the name is free
