"""Nemeses of the load test: faults done to a replicated context's primary while the load runs.

Two kinds, next to ``--kill-node-every`` (:class:`~harness.loadtest.nodes.NodeKiller`), on
the run's own test cluster (every process on this machine):

* **pause** (``--pause-primary-every N --pause-for S``): every *N* seconds the current
  primary of one context (round robin) is stopped with SIGSTOP, as a GC pause or a
  starved VM stops it, and resumed with SIGCONT *S* seconds later. Its node stays
  alive; the supervisor declares it hung (``actors.cluster.failover.HANG_AFTER``) and
  promotes its follower if *S* is long enough. Resumed, the old primary is fenced.
* **partition** (``--partition-every N --partition-for S``): for *S* seconds the primary
  is cut off from its followers and from the supervisor while clients still reach it.
  The cut is made at the transport, inside the processes (a partition of real network
  links cannot be made here: every Ray node of the test cluster is a process of this
  one machine talking over loopback, and cutting loopback links between network
  namespaces needs the nodes started inside them, which ``ray.cluster_utils`` does not
  do): the primary's shipping of batches to its followers blocks for the rest of the
  cut and then fails as unreachable, and the supervisor's pings of that primary get no
  answer, so it is declared hung and replaced. Both sides heal by themselves at the
  end of the cut (a deadline on the wall clock, shared by the processes of one machine).

Each fault is logged with the **unavailability window** it caused: from the moment
the fault began to the first moment a commit was seen applied after it (the version
read from the context's current primary, as the directory names it, rising between
two reads of the same primary after the fault began; looked at every
:data:`PROBE` seconds, so windows are exact to about that). A fault whose context
saw no commit within :data:`WINDOW_LIMIT` seconds has ``unavailable_s`` None.

Runs in a thread of the driver (SIGSTOP and SIGCONT are plain signals to processes of
this machine; the cut is two ``__ray_call__`` calls). Ray is imported inside functions.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAULTS",
    "PROBE",
    "WINDOW_LIMIT",
    "Nemesis",
    "cut_pings",
    "cut_shipping",
    "measure_window",
    "promotion_of",
]

PROBE = 0.1
"""Seconds between two reads of the faulted context's version (the window's resolution)."""
WINDOW_LIMIT = 60.0
"""Seconds a fault's window is looked for before it is given up (``unavailable_s`` None)."""
IN_FLIGHT = 64
"""Reads of a version a window keeps waiting for at most (the oldest are given up: a read
sent to a paused or lost primary may never be answered)."""


@dataclass(frozen=True)
class _Fault:
    """What a fault is done to: the directory, the primary (actor name and handle), the
    context's name, and when the fault begins (monotonic)."""

    directory: Any
    actor_name: str
    actor: Any
    context: str
    at: float


def _pause(nemesis: Nemesis, f: _Fault) -> float | None:
    """SIGSTOP the primary's process for the fault's length (SIGCONT even on error); the
    window if it ended during the pause."""
    import ray

    pid = int(str(ray.get(f.actor.pid.remote(), timeout=30)))
    os.kill(pid, signal.SIGSTOP)
    try:
        window = nemesis._window(f.context, f.at, f.at + nemesis.hold)
        time.sleep(max(0.0, f.at + nemesis.hold - time.monotonic()))  # the whole pause
    finally:
        os.kill(pid, signal.SIGCONT)
    return window


def _partition(nemesis: Nemesis, f: _Fault) -> float | None:
    """Cut the primary off from its followers and the supervisor for the fault's length
    (both sides heal by themselves); the window if it ended during the cut."""
    import ray

    until = time.time() + nemesis.hold
    ray.get(f.actor.__ray_call__.remote(cut_shipping, until), timeout=30)
    ray.get(f.directory.actor.__ray_call__.remote(cut_pings, f.actor_name, until), timeout=30)
    return nemesis._window(f.context, f.at, f.at + nemesis.hold)


FAULTS: dict[str, Callable[[Nemesis, _Fault], float | None]] = {
    "pause": _pause,
    "partition": _partition,
}
"""What each nemesis does, by its name (its options: ``morphz.cli.nemeses.NEMESES``)."""


class Nemesis:
    """Every *every* seconds, does *kind* (``pause`` or ``partition``) to the primary of one
    of *names* (round robin) for *hold* seconds, and measures its window; stops when told or
    *until* seconds after it started. ``kills`` logs one entry per fault (the load test's
    ``kill_log``): ``{"fault", "context", "actor", "at_s", "back_s", "epoch_before",
    "epoch_after", "unavailable_s"}`` (and ``error`` if the fault could not be done)."""

    def __init__(
        self,
        kind: str,
        names: list[str],
        namespace: str,
        every: float,
        hold: float,
        until: float | None = None,
    ) -> None:
        if kind not in FAULTS:
            raise ValueError(f"unknown nemesis {kind!r}")
        self.kind, self.names, self.namespace = kind, names, namespace
        self.every, self.hold, self.until = every, hold, until
        self.kills: list[dict[str, Any]] = []
        self.skipped = 0
        self.errors = 0
        self._stop = threading.Event()
        self._next = 0
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="morphz-nemesis", daemon=True)

    def start(self) -> None:
        """Start (the first fault comes half a period from now)."""
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop after the fault in progress (a paused primary is resumed first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        wait = self.every / 2
        while not self._stop.wait(wait):
            if self.until is not None and time.monotonic() - self._started >= self.until:
                return
            began = time.monotonic()
            name = self.names[self._next % len(self.names)]
            self._next += 1
            entry: dict[str, Any] = {"fault": self.kind, "context": name}
            try:
                self._fault(name, entry)
            except Exception as e:
                self.errors += 1
                entry["error"] = f"{type(e).__name__}: {e}"
            self.kills.append(entry)
            wait = max(0.0, self.every - (time.monotonic() - began))

    def _fault(self, name: str, entry: dict[str, Any]) -> None:
        import ray

        from actors.cluster.directory_handle import directory

        d = directory(self.namespace)
        before = d.get(name)
        actor = ray.get_actor(before.primary.actor, namespace=self.namespace)
        entry.update(actor=before.primary.actor, epoch_before=before.epoch)
        at, wall_at = time.monotonic(), time.time()
        entry["at_s"] = round(at - self._started, 3)
        window = FAULTS[self.kind](self, _Fault(d, before.primary.actor, actor, name, at))
        end = max(time.monotonic(), at + self.hold)
        if window is None:  # not back during the fault: keep looking after it healed
            window = measure_window(name, self.namespace, at, at + WINDOW_LIMIT)
        entry["back_s"] = round(end - self._started, 3)
        entry["unavailable_s"] = None if window is None else round(window, 3)
        entry.update(promotion_of(d, name, before.epoch, wall_at))
        try:
            entry["epoch_after"] = d.get(name).epoch
        except Exception as e:  # the directory busy promoting: said so, not guessed
            entry["epoch_after"] = f"unknown: {type(e).__name__}"

    def _window(self, name: str, at: float, end: float) -> float | None:
        return measure_window(name, self.namespace, at, end)


def measure_window(
    name: str, namespace: str, at: float, end: float, lost: str | None = None
) -> float | None:
    """Seconds from *at* (monotonic) to the first commit seen applied after it on context
    *name*'s current primary, looked for until *end* (None if none by then). Answers of the
    actor *lost* (a primary whose node is being removed: it may serve a moment after *at*)
    do not count.

    Every :data:`PROBE` seconds a read of the version is sent to the primary the directory
    names then, without waiting for the reads sent before (one sent to a paused or lost
    primary is never answered, and must not hold up the next one); the window ends when
    two answers of one actor differ: both reads were served after *at*, so a commit was
    applied between them."""
    import ray

    seen: dict[str, int] = {}
    pending: dict[Any, str] = {}  # read in flight -> the actor it was sent to
    due = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= end:
            return None
        if now >= due:
            due = now + PROBE
            sent = _send_read(name, namespace)
            if sent is not None:
                pending[sent[0]] = sent[1]
            while len(pending) > IN_FLIGHT:
                del pending[next(iter(pending))]
        wait = max(0.0, min(due, end) - time.monotonic())
        if not pending:
            time.sleep(wait)
            continue
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
        for ref in ready:
            actor = pending.pop(ref)
            version = _version_of(ref)
            if version is None or actor == lost:
                continue
            if seen.get(actor, version) != version:
                return time.monotonic() - at
            seen.setdefault(actor, version)


def promotion_of(d: Any, name: str, epoch_before: int, wall_at: float) -> dict[str, Any]:
    """Where a fault's time went, from the supervisor's record of the promotion of *name*
    past *epoch_before* (``DirectoryHandle.failovers``): ``cause``, ``silent_s`` (for a
    hang: how long its pings were missed), ``detected_s`` (from the fault, *wall_at*, to
    the decision to promote) and ``serving_s`` (to the new primary serving). Empty if the
    directory has no such record (not promoted)."""
    try:
        records = d.failovers()
    except Exception:
        return {}
    for r in records:
        if r.get("context") == name and r.get("epoch") == epoch_before + 1:
            detected = float(r["at"]) - wall_at
            return {
                "cause": r.get("cause"),
                "silent_s": r.get("silent_s"),
                "detected_s": round(detected, 3),
                "serving_s": round(detected + float(r["serving_s"]), 3),
            }
    return {}


def _send_read(name: str, namespace: str) -> tuple[Any, str] | None:
    """A read of the version sent to the primary the directory names now (its object ref
    and the actor's name), or None if it cannot be sent."""
    from actors.client.lookup import lookup

    try:
        handle = lookup(name, namespace)
        return handle.actor.version.remote(), handle.transport.actor_name
    except Exception:
        return None


def _version_of(ref: Any) -> int | None:
    """The version a read answered (it is ready), or None if it failed."""
    import ray

    from actors.client.replies import open_reply

    try:
        return int(open_reply(ray.get(ref, timeout=0)))
    except Exception:
        return None


# -- the cut, done inside the primary's and the directory's processes -------------------


def _cut_ship(seq: int, data: bytes, *, original: Any, until: float) -> None:
    """Batches go nowhere until *until*; then the ship fails as unreachable (as a real
    one gives up), and the next write ships again through *original*."""
    from protocol.errors import TransportError

    left = until - time.time()
    if left <= 0:
        return original(seq, data)  # type: ignore[no-any-return]
    time.sleep(left)
    raise TransportError(
        "the followers were unreachable (a partition)", code="replicas_unavailable"
    )


def cut_shipping(actor: Any, until: float) -> bool:
    """Run in the primary (``__ray_call__``): cut its link to its followers until *until*
    (wall clock). True if it was a replicated primary."""
    replicator = getattr(actor, "replicator", None)
    store = getattr(replicator, "store", None)
    if store is None:
        return False
    original = getattr(store, "_uncut_ship", None) or store._ship
    store._uncut_ship = original
    store._ship = functools.partial(_cut_ship, original=original, until=until)
    return True


class _NoAnswer:
    """An actor handle whose calls never answer (the supervisor's pings of a cut primary)."""

    def __getattr__(self, method: str) -> Any:
        return self

    def options(self, **_: Any) -> _NoAnswer:
        return self

    def remote(self, *_: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()


def _cut_get_actor(name: str, namespace: str, *, original: Any, cut: str, until: float) -> Any:
    if name == cut and time.time() < until:
        return _NoAnswer()
    return original(name, namespace)


def _cut_ping(name: str, handle: Any, *, original: Any, cut: str, until: float) -> Any:
    if name == cut and time.time() < until:
        return asyncio.get_running_loop().create_future()  # never answered
    return original(name, handle)


def _cut_witness(
    suspect: str, witness: Any, pid: int, *, original: Any, cut: str, until: float
) -> Any:
    if suspect == cut and time.time() < until:
        return asyncio.get_running_loop().create_future()  # its node is cut off too
    return original(suspect, witness, pid)


def cut_pings(directory: Any, actor_name: str, until: float) -> bool:
    """Run in the directory (``__ray_call__``): its supervisor cannot reach *actor_name*
    (neither its prober's pings nor its other calls) until *until* (wall clock), nor ask
    anything on its node what its process is doing (a partition cuts a node off)."""
    from actors.cluster import failover, probing

    seams = (
        (failover, "_get_actor", _cut_get_actor),
        (probing, "_ping", _cut_ping),
        (probing, "_witness_state", _cut_witness),
    )
    for module, seam, cut in seams:
        original = getattr(module, "_uncut" + seam, None) or getattr(module, seam)
        setattr(module, "_uncut" + seam, original)
        setattr(
            module, seam, functools.partial(cut, original=original, cut=actor_name, until=until)
        )
    return True
