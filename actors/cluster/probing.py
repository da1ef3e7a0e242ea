"""The supervisor's probers: each replicated primary pinged without pause, for the hang rule.

:func:`probe_primaries` keeps one :class:`Prober` per replicated (not hosted) primary
of a directory: it pings the primary every :data:`~actors.cluster.liveness.PROBE_EVERY`
seconds without waiting for the previous answer (the ping is answered by the context
actor's own :data:`~actors.server.connect.LIVENESS_GROUP` thread) and feeds
:class:`~actors.cluster.liveness.Liveness`; a primary found hung, or reported unreachable
by Ray, wakes the supervisor (:func:`wake`), whose next look
(:func:`actors.cluster.failover.supervise`) then starts at once.

Before a primary whose pings the rule finds missed is declared hung, its node is asked
what the primary's process is doing (:class:`~actors.cluster.liveness.Suspicion`): a
*witness* there — the directory's own process when the primary shares its node, else an
actor already running on that node (an idle spare, another context's member), answering
:meth:`~actors.server.host.ContextHost.process_state` from its ``liveness`` thread — reads
``/proc/<pid>/stat``. Stopped, gone, no answer, or no witness: hung. Running: more time,
up to :data:`~actors.cluster.liveness.BUSY_GRACE`. No Ray worker is started for it. Runs
on the directory's event loop; Ray is imported only when a function runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from actors.client.joining import ray_module
from actors.client.names import ContextEntry, is_host
from actors.client.nodes import process_state
from actors.client.replies import ok, open_reply
from actors.cluster.liveness import (
    GONE,
    NO_WITNESS,
    PROBE_EVERY,
    UNANSWERED,
    WITNESS_WAIT,
    Liveness,
    Suspicion,
)
from actors.server.connect import LIVENESS_GROUP

log = logging.getLogger("morphz.failover")

__all__ = [
    "MAX_IN_FLIGHT",
    "PING_LIMIT",
    "WITNESSES",
    "PROBERS",
    "Prober",
    "probe_primaries",
    "stop_prober",
    "wake",
]

PING_LIMIT = 30.0
"""Seconds one ping of a primary is awaited at most (then forgotten, still unanswered)."""
MAX_IN_FLIGHT = 16
"""Pings of one primary unanswered at once, at most (no more are sent meanwhile)."""
WITNESSES = 2
"""Actors of the primary's node asked at once what its process is doing (the first
answer counts)."""


WAKE: dict[str, asyncio.Event] = {}
"""Per namespace: set by a prober whose primary looks lost, so the next look is now."""


def wake(namespace: str) -> asyncio.Event:
    event = WAKE.get(namespace)
    if event is None:
        event = WAKE[namespace] = asyncio.Event()
    return event


class Prober:
    """Pings one primary every :data:`~actors.cluster.liveness.PROBE_EVERY` seconds without
    waiting for the answers (:class:`~actors.cluster.liveness.Liveness` judges them); once
    they say hung, asks the primary's node whether its process is stopped (module doc).

    *node* is the primary's node id, *local* whether it is this (the directory's) node,
    and *witnesses* lists the actors running on that node that may be asked (the primary
    itself never among them)."""

    def __init__(
        self,
        namespace: str,
        actor: str,
        node: str = "",
        local: bool = False,
        witnesses: Callable[[], list[str]] = list,
    ) -> None:
        self.namespace, self.actor, self.node = namespace, actor, node
        self.local, self.witnesses = local, witnesses
        self.liveness = Liveness()
        self.unreachable = 0
        """Consecutive pings Ray answered with the actor unreachable (dead, unavailable)."""
        self.hung_after: float | None = None
        """Seconds from the oldest missed ping to the moment the primary was found hung."""
        self.process: str | None = None
        """Why it was found hung (:meth:`~actors.cluster.liveness.Suspicion.hung`)."""
        self.pid: int | None = None
        """The primary's process id (every ping answers it)."""
        self.suspicion: Suspicion | None = None
        self.task = asyncio.create_task(self._run())
        self._pings: set[asyncio.Task[None]] = set()
        self._check: asyncio.Task[None] | None = None
        self._handles: dict[str, Any] = {}

    async def _run(self) -> None:
        handle = await asyncio.to_thread(_get_actor, self.actor, self.namespace)
        if handle is None:
            return  # not started yet (a promotion in progress) or gone: probed again later
        while True:
            if self.liveness.in_flight() < MAX_IN_FLIGHT:
                number = self.liveness.sent(time.monotonic())
                task = asyncio.create_task(self._ping(handle, number))
                self._pings.add(task)
                task.add_done_callback(self._pings.discard)
            self._judge(time.monotonic())
            asleep = time.monotonic()
            await asyncio.sleep(PROBE_EVERY)
            self.liveness.overslept(time.monotonic() - asleep - PROBE_EVERY)

    def _judge(self, now: float) -> None:
        """Declare the primary hung once the ping rule says so and its node's answer (or
        the grace's end) confirms it; ask the node meanwhile."""
        if self.hung_after is not None:
            return
        if not self.liveness.hung(now):
            self.suspicion = None  # answered since: nothing to confirm
            return
        if self.suspicion is None:
            self.suspicion = Suspicion(now)
        why = self.suspicion.hung(now)
        if why is not None:
            self.hung_after = now - self.liveness.missed(now)[0]
            self.process = why
            log.warning(
                "primary %s hung: its node says %s (state %s, %.2f CPU s used while asked)",
                self.actor,
                why,
                self.suspicion.state,
                self.suspicion.cpu_advanced(),
            )
            wake(self.namespace).set()
        elif (self._check is None or self._check.done()) and self.suspicion.due(now):
            self.suspicion.asking(now)
            self._check = asyncio.create_task(self._witness(self.suspicion))

    async def _witness(self, suspicion: Suspicion) -> None:
        state, cpu = await self._ask()
        if self.suspicion is not suspicion:
            return  # answered meanwhile
        suspicion.witnessed(state, cpu)
        self._judge(time.monotonic())

    async def _ask(self) -> tuple[str, float | None]:
        """What the primary's process is doing, as its node says: a ``/proc`` state letter
        and its CPU seconds, or :data:`~actors.cluster.liveness.GONE` /
        :data:`~actors.cluster.liveness.UNANSWERED` /
        :data:`~actors.cluster.liveness.NO_WITNESS` (and None)."""
        pid = self.pid
        if pid is None:
            return NO_WITNESS, None  # it never answered a ping: its pid is not known
        if self.local:  # the primary shares the directory's node: read its /proc here
            try:
                found = open_reply(
                    await asyncio.wait_for(_witness_state(self.actor, None, pid), WITNESS_WAIT)
                )
            except Exception:
                return UNANSWERED, None
            return (GONE, None) if found is None else (str(found[0]), float(found[1]))
        names = [n for n in self.witnesses() if n != self.actor][:WITNESSES]
        if not names:
            return NO_WITNESS, None
        asks = [asyncio.ensure_future(self._ask_one(name, pid)) for name in names]
        try:
            for asked in asyncio.as_completed(asks, timeout=WITNESS_WAIT):
                try:
                    found = await asked
                except TimeoutError:
                    raise
                except Exception as e:  # this witness cannot say: the other may
                    log.info("primary %s: a witness on its node failed: %s", self.actor, e)
                    continue
                return (GONE, None) if found is None else (str(found[0]), float(found[1]))
        except TimeoutError:
            pass
        finally:
            for ask in asks:
                ask.cancel()
        return UNANSWERED, None

    async def _ask_one(self, name: str, pid: int) -> Any:
        handle = self._handles.get(name)
        if handle is None:
            handle = await asyncio.to_thread(_get_actor, name, self.namespace)
            if handle is None:
                raise LookupError(f"witness {name} is not running")
            self._handles[name] = handle
        try:
            return open_reply(await _witness_state(self.actor, handle, pid))
        except Exception:
            self._handles.pop(name, None)  # looked up again next time (claimed, restarted)
            raise

    async def _ping(self, handle: Any, number: int) -> None:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, ActorUnschedulableError

        try:
            pid = await asyncio.wait_for(_ping(self.actor, handle), PING_LIMIT)
        except (ActorUnavailableError, ActorDiedError, ActorUnschedulableError):
            self.unreachable += 1
            wake(self.namespace).set()
            return
        except Exception:  # no answer within the limit, or a failure of the call itself
            return
        self.unreachable = 0
        if isinstance(pid, int) and not isinstance(pid, bool):
            self.pid = pid
        self.liveness.answered(number, time.monotonic())

    def stop(self) -> None:
        self.task.cancel()
        for task in list(self._pings):
            task.cancel()
        if self._check is not None:
            self._check.cancel()


def _ping(name: str, handle: Any) -> Any:
    """One ping of the primary *name* (an awaitable): its pid, answered by the actor's
    :data:`LIVENESS_GROUP` thread, never waiting for the store or the main event loop."""
    del name  # the seam the load test's partition nemesis cuts by name
    return handle.pid.options(max_task_retries=0, concurrency_group=LIVENESS_GROUP).remote()


def _witness_state(suspect: str, witness: Any, pid: int) -> Any:
    """Ask *witness* (an actor on the node of the primary *suspect*; None: this process,
    on the same node) what process *pid* is doing: an awaitable reply envelope, answered by
    the witness's :data:`LIVENESS_GROUP` thread."""
    del suspect  # the seam the load test's partition nemesis cuts (the suspect's node)
    if witness is None:
        return asyncio.to_thread(_local_state, pid)
    method = witness.process_state.options(max_task_retries=0, concurrency_group=LIVENESS_GROUP)
    return method.remote(pid)


PROBERS: dict[tuple[str, str], Prober] = {}
"""The prober of each replicated context's primary, by (namespace, context name)."""


def _local_state(pid: int) -> bytes:
    found = process_state(pid)
    return ok(None if found is None else list(found))


def probe_primaries(
    directory: Any,
    entries: list[ContextEntry],
    witnesses: Callable[[str], list[str]] = lambda _: [],
) -> None:
    """Start a prober for each replicated primary not probed yet (and for a new primary
    after a promotion); stop those of contexts no longer in the directory. *witnesses*
    lists the actors running on a node (by node id), for a prober to ask about its
    primary's process."""
    ns = directory.namespace
    here = getattr(directory, "node_id", None)
    wanted = {
        (ns, e.name): e.primary for e in entries if e.replicated and not is_host(e.primary.actor)
    }
    for key in [k for k in PROBERS if k[0] == ns and k not in wanted]:
        stop_prober(key)
    for key, primary in wanted.items():
        prober = PROBERS.get(key)
        if prober is not None and (prober.actor != primary.actor or prober.task.done()):
            stop_prober(key)
            prober = None
        if prober is None:
            node = primary.node_id
            PROBERS[key] = Prober(ns, primary.actor, node, node == here, _on_node(witnesses, node))


def _on_node(witnesses: Callable[[str], list[str]], node: str) -> Callable[[], list[str]]:
    return lambda: witnesses(node)


def stop_prober(key: tuple[str, str]) -> None:
    prober = PROBERS.pop(key, None)
    if prober is not None:
        prober.stop()


def _get_actor(name: str, namespace: str) -> Any | None:
    try:
        return ray_module().get_actor(name, namespace=namespace)
    except ValueError:
        return None
