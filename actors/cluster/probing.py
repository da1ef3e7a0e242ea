"""The supervisor's probers: each replicated primary pinged without pause, for the hang rule.

:func:`probe_primaries` keeps one :class:`Prober` per replicated (not hosted) primary
of a directory: it pings the primary every :data:`~actors.cluster.liveness.PROBE_EVERY`
seconds without waiting for the previous answer (the ping is answered by the context
actor's own :data:`~actors.server.connect.LIVENESS_GROUP` thread) and feeds
:class:`~actors.cluster.liveness.Liveness`; a primary found hung, or reported unreachable
by Ray, wakes the supervisor (:func:`wake`), whose next look
(:func:`actors.cluster.failover.supervise`) then starts at once. Runs on the directory's
event loop; Ray is imported only when a function runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from actors.client.joining import ray_module
from actors.client.names import ContextEntry, is_host
from actors.cluster.liveness import PROBE_EVERY, Liveness
from actors.server.connect import LIVENESS_GROUP

__all__ = [
    "MAX_IN_FLIGHT",
    "PING_LIMIT",
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


WAKE: dict[str, asyncio.Event] = {}
"""Per namespace: set by a prober whose primary looks lost, so the next look is now."""


def wake(namespace: str) -> asyncio.Event:
    event = WAKE.get(namespace)
    if event is None:
        event = WAKE[namespace] = asyncio.Event()
    return event


class Prober:
    """Pings one primary every :data:`~actors.cluster.liveness.PROBE_EVERY` seconds without
    waiting for the answers (:class:`~actors.cluster.liveness.Liveness` judges them)."""

    def __init__(self, namespace: str, actor: str) -> None:
        self.namespace, self.actor = namespace, actor
        self.liveness = Liveness()
        self.unreachable = 0
        """Consecutive pings Ray answered with the actor unreachable (dead, unavailable)."""
        self.hung_after: float | None = None
        """Seconds from the oldest missed ping to the moment the primary was found hung."""
        self.task = asyncio.create_task(self._run())
        self._pings: set[asyncio.Task[None]] = set()

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
            now = time.monotonic()
            if self.hung_after is None and self.liveness.hung(now):
                self.hung_after = now - self.liveness.missed(now)[0]
                wake(self.namespace).set()
            asleep = time.monotonic()
            await asyncio.sleep(PROBE_EVERY)
            self.liveness.overslept(time.monotonic() - asleep - PROBE_EVERY)

    async def _ping(self, handle: Any, number: int) -> None:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, ActorUnschedulableError

        try:
            await asyncio.wait_for(_ping(self.actor, handle), PING_LIMIT)
        except (ActorUnavailableError, ActorDiedError, ActorUnschedulableError):
            self.unreachable += 1
            wake(self.namespace).set()
            return
        except Exception:  # no answer within the limit, or a failure of the call itself
            return
        self.unreachable = 0
        self.liveness.answered(number, time.monotonic())

    def stop(self) -> None:
        self.task.cancel()
        for task in list(self._pings):
            task.cancel()


def _ping(name: str, handle: Any) -> Any:
    """One ping of the primary *name* (an awaitable): its pid, answered by the actor's
    :data:`LIVENESS_GROUP` thread, never waiting for the store or the main event loop."""
    del name  # the seam the load test's partition nemesis cuts by name
    return handle.pid.options(max_task_retries=0, concurrency_group=LIVENESS_GROUP).remote()


PROBERS: dict[tuple[str, str], Prober] = {}
"""The prober of each replicated context's primary, by (namespace, context name)."""


def probe_primaries(directory: Any, entries: list[ContextEntry]) -> None:
    """Start a prober for each replicated primary not probed yet (and for a new primary
    after a promotion); stop those of contexts no longer in the directory."""
    ns = directory.namespace
    wanted = {
        (ns, e.name): e.primary.actor
        for e in entries
        if e.replicated and not is_host(e.primary.actor)
    }
    for key in [k for k in PROBERS if k[0] == ns and k not in wanted]:
        stop_prober(key)
    for key, actor in wanted.items():
        prober = PROBERS.get(key)
        if prober is not None and (prober.actor != actor or prober.task.done()):
            stop_prober(key)
            prober = None
        if prober is None:
            PROBERS[key] = Prober(ns, actor)


def stop_prober(key: tuple[str, str]) -> None:
    prober = PROBERS.pop(key, None)
    if prober is not None:
        prober.stop()


def _get_actor(name: str, namespace: str) -> Any | None:
    try:
        return ray_module().get_actor(name, namespace=namespace)
    except ValueError:
        return None
