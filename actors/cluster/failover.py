"""The supervisor of placed contexts: promotion when a primary's node is lost, repair, restore.

:func:`watch` runs inside the directory actor (:mod:`actors.cluster.directory` starts
it on its event loop), so there is one supervisor per namespace and it
restarts with the directory. Every :data:`POLL` seconds it compares each
placed context's members with the live nodes (Ray's node table):

* **the primary's node is gone** (Ray's node table says so, its raylet refuses
  connections or does not answer within :data:`~actors.client.nodes.RAYLET_TIMEOUT`, or
  its actor is reported unreachable — Ray answering "unavailable" or "dead" — to its
  prober), or it is
  **hung**: its prober (:mod:`actors.cluster.probing`) found it missing its pings by the
  rule of :class:`actors.cluster.liveness.Liveness`, as a paused process (SIGSTOP, a long
  GC pause, a starved VM) does while its node looks alive — :func:`promote`: every
  reachable follower is fenced (all at once) at ``epoch + 1`` (from then on it refuses
  the old primary's batches, so the old primary can never acknowledge another write), the one
  holding the most batches (ties: smallest node id) applies everything it
  holds and releases its store, the directory's entry moves to ``epoch + 1``
  by compare-and-set naming that follower's actor the primary, and the
  follower is promoted in place (:meth:`actors.cluster.follower.FollowerActor.become_primary`:
  the same warm process opens the store it holds as the primary). Replacement
  followers are recruited during the seal: an idle warm spare of their node
  (:mod:`actors.cluster.spares`) is assigned the context, else a new follower's
  process is started; the new primary goes on with the chain, so a surviving
  follower behind is caught up from the log and a replacement gets a snapshot. When
  ``acks == follower_count``, the promoted follower holds every acknowledged
  commit (each was held by every follower); with ``acks < follower_count`` it
  still does as long as every
  surviving follower answers the fence (each acknowledged batch is held by
  ``acks`` followers, and followers hold batches in order, so the one holding
  the most holds them all).
* **a follower's node is gone, or followers are missing** — :func:`repair`:
  the entry's followers become the live ones plus replacements on live nodes
  that hold no member (the least loaded first, ties by node id), and the
  primary is told (``replicate``) so it snapshots the new ones. A lost
  primary's node that comes back (a new node id with the same store root) is
  such a node: its old store — possibly holding commits never acknowledged —
  is replaced whole by the snapshot.

* **an unreplicated context's node is gone** — :func:`restore`, once a live
  node has the lost node's store root and the context's store on its disk (a
  machine that came back, under a new node id): the actor is started there
  under its name and the entry records that node.

No follower reachable: nothing is promoted and the context is unavailable
until its primary's node returns (as with replication off). Ray is imported
only when a function runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from actors.client.joining import ray_module
from actors.client.names import ContextEntry, Member, follower_actor, is_host
from actors.client.nodes import pinned, raylet_down
from actors.client.replies import open_reply
from actors.cluster.follower import start_follower
from actors.cluster.leadership import keep_standby, stand_by
from actors.cluster.probing import PROBERS, probe_primaries, stop_prober, wake
from actors.cluster.replication import REPLICATION, sign_epoch
from actors.cluster.spares import (
    ASSIGN_TIMEOUT,
    SparePool,
    is_spare,
    sign_assignment,
    spares_wanted,
)
from actors.server.connect import connect
from protocol.errors import FENCED, MorphzError, TransportError
from storage import context_path

log = logging.getLogger("morphz.failover")

POLL = 0.5
"""Seconds between two looks at the cluster (a prober that sees its primary hung or
unreachable starts the next look at once)."""
PING_TIMEOUT = 1.0
"""Seconds the supervisor waits for a replaced primary to answer that it was told."""
SUSPECT_LOOKS = 1
"""Consecutive looks at which the primary is unreachable before it is replaced."""
CALL_TIMEOUT = 15.0
"""Seconds the supervisor waits for one follower or primary call."""
START_TIMEOUT = 60.0
"""Seconds a promoted follower may take to open as the primary and snapshot the others."""
HISTORY = 64
"""Promotions remembered by the directory (:attr:`DirectoryActor.failovers`), newest last."""

__all__ = [
    "CALL_TIMEOUT",
    "HISTORY",
    "PING_TIMEOUT",
    "POLL",
    "START_TIMEOUT",
    "SUSPECT_LOOKS",
    "promote",
    "repair",
    "restore",
    "supervise",
    "watch",
]


async def watch(directory: Any) -> None:
    """Supervise the replicated contexts of *directory* (a running ``DirectoryActor``) while
    it leads its namespace; while it stands by, watch its leader's node and take over when
    it is lost (:mod:`actors.cluster.leadership`)."""
    woken = wake(directory.namespace)
    while True:
        try:
            await asyncio.wait_for(woken.wait(), POLL)
        except TimeoutError:
            pass
        woken.clear()
        try:
            if directory.term is None and not await stand_by(directory):
                continue
            if not await asyncio.to_thread(directory.still_leads):
                continue  # a newer term exists: this directory acts no more
            await supervise(directory)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("supervisor pass failed")


async def supervise(directory: Any) -> None:
    """One look: promote where a primary's node is gone, repair where followers are, and
    re-create an unreplicated context whose node came back. Contexts are looked at
    concurrently: one context's promotion does not delay another's."""
    entries = list(directory.entries.values())
    pool = spares_of(directory.namespace)
    probe_primaries(directory, entries, lambda node: _witnesses(directory, pool, node))
    nodes = await asyncio.to_thread(_nodes)
    down = set(await asyncio.gather(*(_down(n, *where) for n, where in nodes.items()))) - {""}
    directory.down = down
    live = set(nodes) - down
    _keep_standby(directory, live)
    if not entries:
        if pool.idle:
            pool.tend(directory.roots, set(), 0, frozenset())
        return
    _learn_roots(directory, live)
    held: dict[str, int] = {}
    for e in entries:
        if e.replicated and not is_host(e.primary.actor):
            for m in (e.primary, *e.followers):
                held[m.node_id] = held.get(m.node_id, 0) + 1
    pool.tend(directory.roots, live, spares_wanted(held), _members(directory))
    looks = [_look(directory, entry, nodes, live) for entry in entries]
    for entry, outcome in zip(
        entries, await asyncio.gather(*looks, return_exceptions=True), strict=True
    ):
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, Exception):
            log.error("context %r: look failed: %s", entry.name, outcome, exc_info=outcome)


async def _look(
    directory: Any, entry: ContextEntry, nodes: dict[str, tuple[str, int]], live: set[str]
) -> None:
    if is_host(entry.primary.actor):
        return  # a hosted context: its host is restarted by Ray, activated on demand
    if not entry.replicated:
        if entry.primary.node_id not in live:
            await restore(directory, entry, live)
        return
    cause = (
        "node lost"
        if entry.primary.node_id not in nodes
        else "raylet down"
        if entry.primary.node_id in directory.down
        else _primary_lost(directory, entry)
    )
    if cause is not None:
        prober = PROBERS.get((directory.namespace, entry.name))
        silent = None if prober is None else prober.hung_after
        process = None if prober is None or cause != "hung" else prober.process
        stop_prober((directory.namespace, entry.name))
        await promote(
            directory,
            entry,
            live - {entry.primary.node_id},
            cause=cause,
            silent=silent,
            process=process,
        )
    else:
        await repair(directory, entry, live)


POOLS: dict[str, SparePool] = {}
"""The warm spares of each namespace's supervisor (:mod:`actors.cluster.spares`)."""


def _members(directory: Any) -> frozenset[str]:
    """The actor names of every member (primary, followers) the directory's entries record."""
    return frozenset(
        m.actor for e in directory.entries.values() for m in (e.primary, *e.followers)
    )


def _witnesses(directory: Any, pool: SparePool, node: str) -> list[str]:
    """The actors running on *node* that a prober may ask about its primary's process: the
    node's idle spares that answered once, then the members of the directory's replicated
    contexts there (context hosts, of another class, are left out)."""
    spares = [s for s in pool.idle.get(node, []) if s in pool.ready]
    members = sorted(
        m.actor
        for e in directory.entries.values()
        for m in (e.primary, *e.followers)
        if m.node_id == node and not is_host(m.actor)
    )
    return spares + members


def spares_of(namespace: str) -> SparePool:
    """The spare pool of *namespace*'s supervisor."""
    pool = POOLS.get(namespace)
    if pool is None:
        pool = POOLS[namespace] = SparePool(namespace, start_follower)
    return pool


_PROBING: dict[str, asyncio.Task[None]] = {}
"""Probes of new nodes' store roots in flight, by node id (the reference keeps each alive)."""


def _learn_roots(directory: Any, live: set[str]) -> None:
    """Probe the store root of every live node the directory does not know yet, in the
    background: a node that joins (or comes back under a new id) is then ready to take a
    replacement follower without a probe on a promotion's critical path."""
    for node in sorted(live - set(directory.roots) - set(_PROBING)):
        task = asyncio.create_task(_probe(directory, node))
        _PROBING[node] = task
        task.add_done_callback(lambda _, node=node: _PROBING.pop(node, None))  # type: ignore[misc]


async def _probe(directory: Any, node: str) -> None:
    try:
        await directory.root_of(node)
    except MorphzError as e:  # asked again at a later look
        log.info("store root of node %s not learnt yet: %s", node, e)


def _nodes() -> dict[str, tuple[str, int]]:
    """The live nodes (Ray's node table): node id -> the address and port of its raylet."""
    ray = ray_module()
    return {
        str(n["NodeID"]): (str(n.get("NodeManagerAddress", "")), int(n.get("NodeManagerPort", 0)))
        for n in ray.nodes()
        if n.get("Alive")
    }


_STANDBY: dict[str, asyncio.Task[None]] = {}
"""Per namespace: the leader's tending of its standby in flight (one at a time)."""


def _keep_standby(directory: Any, live: set[str]) -> None:
    """:func:`~actors.cluster.leadership.keep_standby` in the background: no look waits."""
    task = _STANDBY.get(directory.namespace)
    if task is not None and not task.done():
        return

    async def keep() -> None:
        try:
            await keep_standby(directory, live)
        except Exception as e:  # tried again at the next look
            log.warning("standby directory not kept: %s", e)

    _STANDBY[directory.namespace] = asyncio.create_task(keep())


async def _down(node: str, address: str, port: int) -> str:
    """*node* if its raylet is down (:func:`~actors.client.nodes.raylet_down`), else ``""``."""
    return node if await asyncio.to_thread(raylet_down, address, port) else ""


def _primary_lost(directory: Any, entry: ContextEntry) -> str | None:
    """Why the primary is lost, or None: its actor was unreachable at :data:`SUSPECT_LOOKS`
    consecutive pings (Ray reports it unavailable or dead; Ray takes about 1.5 s to
    give up connecting to a lost node's worker), or it is **hung**: it missed its pings
    past the threshold of :class:`~actors.cluster.liveness.Liveness` (paused, or hung
    while its node lives).

    Ray marks a lost node dead only after its heartbeats time out (tens of
    seconds by default); its actors are unreachable at once. A primary that
    was only restarting, or only slow past the threshold, is replaced too: safe, since
    a replaced primary is fenced (its followers refuse its batches; a restart opens
    nothing).
    """
    prober = PROBERS.get((directory.namespace, entry.name))
    if prober is None or prober.actor != entry.primary.actor:
        return None
    if prober.unreachable >= SUSPECT_LOOKS:
        return "unreachable"
    if prober.hung_after is not None:
        log.warning(
            "context %r: primary %s hung (no answer for %.2f s; threshold %.2f s)",
            entry.name,
            entry.primary.actor,
            prober.hung_after,
            prober.liveness.threshold(),
        )
        return "hung"
    return None


async def _call(actor: Any, method: str, *args: Any) -> Any:
    ref = getattr(actor, method).remote(*args)
    return open_reply(await asyncio.wait_for(ref, CALL_TIMEOUT))


def _get_actor(name: str, namespace: str) -> Any | None:
    try:
        return ray_module().get_actor(name, namespace=namespace)
    except ValueError:
        return None


async def _replacements(
    directory: Any, entry: ContextEntry, keep: list[Member], live: set[str], epoch: int
) -> list[Member]:
    """New followers on live nodes holding no member of *entry*, up to its follower count."""
    used = {entry.primary.node_id, *(m.node_id for m in keep)}
    load: dict[str, int] = {}
    for e in directory.entries.values():
        for m in (e.primary, *e.followers):
            load[m.node_id] = load.get(m.node_id, 0) + 1
    free = sorted((n for n in live if n not in used), key=lambda n: (load.get(n, 0), n))
    taken = {m.actor for m in (entry.primary, *entry.followers, *keep)}
    out: list[Member] = []
    k = 0
    pool = spares_of(directory.namespace)
    wanted = free[: max(0, entry.follower_count - len(keep))]
    if wanted:
        await pool.find(_members(directory))  # a directory that just took over
    for node in wanted:
        while follower_actor(entry.name, k, epoch) in taken:
            k += 1
        name = follower_actor(entry.name, k, epoch)
        root = await directory.root_of(node)
        spare = pool.claim(node) if directory.roots.get(node) == root else None
        taken.add(name)
        out.append(Member(node_id=node, actor=spare or name, store_dir=root))
    return out


async def _recruit(
    entry: ContextEntry, fresh: list[Member], namespace: str, epoch: int
) -> tuple[list[Member], list[Any]]:
    """Make the new followers *fresh* of context *name* run: every claimed spare is assigned
    the context (all at once: :func:`_assign`), any other follower's process is started (it
    boots while the caller goes on; the start, a blocking call to Ray's GCS, runs off the
    event loop). The members as they will be recorded (a spare that does not take its
    assignment is replaced by a new follower on its node) and the Ray handles of the actors
    started or assigned (what to stop if they are never recorded)."""
    name = entry.name
    spares = [m for m in fresh if is_spare(m.actor)]
    answers = await asyncio.gather(*(_assign(m, name, namespace) for m in spares))
    assigned = dict(zip(spares, answers, strict=True))
    out: list[Member] = []
    handles: list[Any] = []
    for m in fresh:
        actor = assigned.get(m)
        if actor is not None:
            out.append(m)
            handles.append(actor)
            continue
        if is_spare(m.actor):  # not assigned: a new follower of its node in its place
            taken = {x.actor for x in (entry.primary, *entry.followers, *fresh, *out)}
            k = 0
            while follower_actor(name, k, epoch) in taken:
                k += 1
            m = m.model_copy(update={"actor": follower_actor(name, k, epoch)})
        handles.append(await asyncio.to_thread(start_follower, m, name, namespace))
        out.append(m)
    return out, handles


async def _assign(m: Member, name: str, namespace: str) -> Any | None:
    """The Ray handle of spare *m* once it took its assignment to context *name*; None
    (the spare stopped) if it is gone, refuses, or does not answer within
    :data:`~actors.cluster.spares.ASSIGN_TIMEOUT` — a bound for a hung spare only: a running
    one, however starved its machine, answers before a new process would (docs/cluster.md)."""
    actor = await asyncio.to_thread(_get_actor, m.actor, namespace)
    try:
        if actor is None:
            raise TransportError(f"spare {m.actor} is gone", code="actor_error")
        record = sign_assignment(namespace, m.actor, m.store_dir, name)
        open_reply(await asyncio.wait_for(actor.assign.remote(record), ASSIGN_TIMEOUT))
        return actor
    except Exception as e:
        log.warning("context %r: spare %s not assigned: %s", name, m.actor, e)
        if actor is not None:
            await asyncio.to_thread(ray_module().kill, actor, no_restart=True)
        return None


async def promote(
    directory: Any,
    entry: ContextEntry,
    live: set[str],
    *,
    cause: str = "lost",
    silent: float | None = None,
    process: str | None = None,
) -> ContextEntry | None:
    """Promote the follower of *entry* holding the most batches (see the module doc).

    None when no follower answers: the context waits for its primary's node. *cause*
    (why the primary was found lost), *silent* (seconds its pings had been missed) and,
    for a hang, *process* (what its node said of its process:
    :meth:`~actors.cluster.liveness.Suspicion.hung`) go into the record of the promotion
    (the directory's ``failovers``).
    """
    ns, epoch = directory.namespace, entry.epoch + 1
    # Followers take no epoch the directory did not sign (storage.replication.epochs).
    cert = sign_epoch(entry.name, epoch, "fence")
    started, at = time.monotonic(), time.time()
    reachable: list[tuple[Member, Any]] = []
    for m in entry.followers:
        if m.node_id not in live:
            log.warning("context %r: follower %s is on a lost node", entry.name, m.actor)
            continue
        actor = _get_actor(m.actor, ns)
        if actor is None:
            log.warning("context %r: follower %s is not running", entry.name, m.actor)
            continue
        reachable.append((m, actor))
    fences = await asyncio.gather(
        *(_call(actor, "fence", epoch, cert) for _, actor in reachable), return_exceptions=True
    )
    held: list[tuple[int, str, Member, Any]] = []
    resumed: list[tuple[int, str, Member, Any]] = []
    for (m, actor), status in zip(reachable, fences, strict=True):
        if isinstance(status, MorphzError) and status.code == FENCED:
            # Sealed by a promotion to this epoch that stopped before it was recorded (its
            # directory was lost with the primary's node): that promotion is resumed.
            log.warning("context %r: follower %s was sealed already: promoting it",
                        entry.name, m.actor)  # fmt: skip
            resumed.append((0, m.node_id, m, actor))
            continue
        if isinstance(status, BaseException):
            log.warning("context %r: follower %s not fenced: %s", entry.name, m.actor, status)
            continue
        held.append((int(status["held_seq"]), m.node_id, m, actor))
    if not held and not resumed:
        log.error("context %r: primary lost and no follower answers", entry.name)
        return None
    fenced = time.monotonic() - started
    held.sort(key=lambda t: (-t[0], t[1]))
    resumed.sort(key=lambda t: t[1])
    held = resumed[:1] + held  # a sealed follower released its store to be the primary
    _, _, chosen, actor = held[0]
    keep = [m for _, _, m, _ in held[1:]]
    keep += await _replacements(directory, entry, keep, live - {chosen.node_id}, epoch)
    fresh = [m for m in keep if m not in entry.followers]
    # Spares are assigned and other processes started while the chosen follower seals.
    recruiting = asyncio.ensure_future(_recruit(entry, fresh, ns, epoch))
    marks: dict[str, float] = {}
    recruiting.add_done_callback(lambda _: marks.setdefault("recruited", time.monotonic()))
    started_new: list[Any] = []
    try:
        if not await asyncio.to_thread(directory.still_leads):
            raise TransportError(f"context {entry.name!r}: not promoted, a newer directory"
                                 " term exists", code="not_leader")  # fmt: skip
        if not resumed:
            await _call(actor, "seal", epoch, sign_epoch(entry.name, epoch, "seal", chosen.actor))
        recruited, started_new = await recruiting
        keep = [m for m in keep if m in entry.followers] + recruited
        promoted = ContextEntry.model_validate(
            open_reply(
                await directory.promote(
                    entry.name, entry.epoch, chosen.model_dump(), [m.model_dump() for m in keep]
                )
            )
        )
    except Exception:
        if not started_new:
            try:
                started_new = (await recruiting)[1]
            except Exception as e:
                log.warning("context %r: new followers not started: %s", entry.name, e)
        for a in started_new:  # recorded nowhere: they must not linger
            ray_module().kill(a, no_restart=True)
        raise
    sealed = time.monotonic() - started
    _tell_replaced(entry.primary.actor, ns)
    # The chosen follower becomes the primary in its own (warm) process, over its store.
    info = await asyncio.wait_for(
        actor.become_primary.remote(
            epoch, bytes.fromhex(promoted.epoch_signature), [m.actor for m in recruited]
        ),
        START_TIMEOUT,
    )
    served = time.monotonic() - started
    record = {
        "context": entry.name,
        "epoch": epoch,
        "cause": cause,
        "silent_s": None if silent is None else round(silent, 3),
        "process": process,
        "at": at,
        "fenced_s": round(fenced, 3),
        "recorded_s": round(sealed, 3),
        "serving_s": round(served, 3),
        "recruited_s": round(marks.get("recruited", time.monotonic()) - started, 3),
        "replacements": len(fresh),
        "resumed": bool(resumed),
        "spares": sum(1 for m in recruited if is_spare(m.actor)),
        "replacement_serving_s": None if recruited else round(served, 3),
    }
    directory.failovers.append(record)
    del directory.failovers[:-HISTORY]
    if recruited:
        _time_replacements(record, started_new, epoch, started)
    log.warning(
        "context %r: promoted %s on node %s at epoch %d (%s): %s; open error: %s",
        entry.name,
        chosen.actor,
        chosen.node_id,
        epoch,
        cause,
        record,
        info.get("open_error"),
    )
    return promoted


_TIMING: set[asyncio.Task[None]] = set()
"""Promotions whose replacement followers are watched (the reference keeps each alive)."""
SERVING_WAIT = 300.0
"""Seconds the supervisor watches a promotion's replacement followers for the snapshot."""


def _time_replacements(
    record: dict[str, Any], handles: list[Any], epoch: int, started: float
) -> None:
    """Set ``replacement_serving_s`` in the promotion's *record* (seconds from the
    promotion's start, a ``time.monotonic()`` value) once every replacement follower
    (*handles*) holds the promoted primary's snapshot at *epoch* — until then a commit that
    needs its acknowledgement waits (up to
    :data:`~actors.cluster.replication.SHIP_TIMEOUT`, then ``replicas_unavailable``). In
    the background, for at most :data:`SERVING_WAIT` seconds (None after: logged)."""
    task = asyncio.create_task(_time_serving(record, handles, epoch, started))
    _TIMING.add(task)
    task.add_done_callback(_TIMING.discard)


async def _time_serving(
    record: dict[str, Any], handles: list[Any], epoch: int, started: float
) -> None:
    deadline = started + SERVING_WAIT
    for actor in handles:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("context %r: a replacement follower took no snapshot within %.0f s",
                            record["context"], SERVING_WAIT)  # fmt: skip
                return
            try:
                status = open_reply(await asyncio.wait_for(actor.status.remote(), left))
                if int(status["epoch"]) >= epoch:
                    break
            except Exception:  # no answer yet, or restarting: asked again
                pass
            await asyncio.sleep(POLL / 5)  # answered at an older epoch: not installed yet
    record["replacement_serving_s"] = round(time.monotonic() - started, 3)
    log.info("context %r: its replacement followers hold the promoted primary's snapshot"
             " %.3f s after the promotion started", record["context"],
             record["replacement_serving_s"])  # fmt: skip


_TELLING: dict[tuple[str, str], asyncio.Task[None]] = {}
"""Replaced primaries being told so, by (namespace, actor name) (the reference keeps each alive)."""
TELL_FOR = 600.0
"""Seconds the supervisor keeps telling a replaced primary that Ray still holds."""


def _tell_replaced(name: str, namespace: str) -> None:
    """Tell the replaced primary *name*, for as long as Ray still holds it (paused,
    partitioned) and until it answers, to re-read the directory: it then fences itself and
    refuses every call, reads too, so the clients still calling it move to the new primary;
    once it answered so, it is stopped. In the background: a paused one answers when it
    resumes, a cut one when it heals."""
    key = (namespace, name)
    if key not in _TELLING:
        task = asyncio.create_task(_tell(name, namespace))
        _TELLING[key] = task
        task.add_done_callback(lambda _: _TELLING.pop(key, None))


async def _tell(name: str, namespace: str) -> None:
    deadline = time.monotonic() + TELL_FOR
    while time.monotonic() < deadline:
        actor = _get_actor(name, namespace)
        if actor is None:
            return  # gone (its node lost, or stopped)
        try:
            ref = actor.replicate.options(max_task_retries=0).remote()
            open_reply(await asyncio.wait_for(ref, PING_TIMEOUT))
        except MorphzError as e:  # the answer of a primary that learnt it was replaced
            log.info("replaced primary %s told (%s); stopping it", name, e.code)
            # Fenced, it serves nothing; stopped, it releases its store's lock, so its node
            # can take a follower of the context (the store is replaced by a snapshot).
            ray_module().kill(actor, no_restart=True)
            return
        except Exception:  # no answer yet (paused, cut off, restarting): again later
            await asyncio.sleep(POLL)
            continue
        return  # answered as a primary: the directory names it again (nothing to do)


_ABSENT: set[tuple[str, str]] = set()
"""(node id, context path) pairs where a probe found no store: a disk does not gain one."""


def _store_exists(path: str) -> bool:
    return os.path.isdir(path) and bool(os.listdir(path))


async def _holds(node: str, path: str) -> bool:
    """Whether *path* (a context's store) exists on *node* (a probe pinned there)."""
    if (node, path) in _ABSENT:
        return False
    ray = ray_module()
    probe = ray.remote(num_cpus=0, scheduling_strategy=pinned(node))(_store_exists)
    try:
        found = bool(await asyncio.wait_for(probe.remote(path), CALL_TIMEOUT))
    except Exception:
        return False  # unreachable now: asked again at the next look
    if not found:
        _ABSENT.add((node, path))
    return found


def _reopen(entry: ContextEntry, node: str, namespace: str) -> None:
    """Stop what Ray still holds under the primary's actor name, then start it on *node*."""
    ray = ray_module()
    actor = _get_actor(entry.primary.actor, namespace)
    if actor is not None:
        ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + CALL_TIMEOUT
        while _get_actor(entry.primary.actor, namespace) is not None:
            if time.monotonic() > deadline:
                raise TransportError(
                    f"the actor name {entry.primary.actor} is still taken", code="actor_error"
                )
            time.sleep(0.1)
    connect(
        entry.name,
        store_dir=entry.primary.store_dir,
        node_id=node,
        namespace=namespace,
        lifetime="detached",
        create=False,
        replication=REPLICATION,
    )


async def restore(directory: Any, entry: ContextEntry, live: set[str]) -> ContextEntry | None:
    """Replication off, the primary's node lost: once a live node has the lost node's store
    root and the context's store on its disk (a machine that came back: Ray gives it a new
    node id), start the context's actor there under its name and record that node. None
    while no such node is live."""
    root = directory.roots.get(entry.primary.node_id)
    if root is None:
        return None
    path = str(context_path(entry.primary.store_dir, entry.name))
    for node in sorted(live):
        try:
            if await directory.root_of(node) != root:
                continue
        except MorphzError:
            continue
        if not await _holds(node, path):
            continue
        await asyncio.to_thread(_reopen, entry, node, directory.namespace)
        moved = entry.primary.model_copy(update={"node_id": node})
        updated = ContextEntry.model_validate(
            open_reply(await directory.set_primary(entry.name, entry.epoch, moved.model_dump()))
        )
        log.warning("context %r: served again on node %s (its store root came back)",
                    entry.name, node)  # fmt: skip
        return updated
    return None


async def repair(directory: Any, entry: ContextEntry, live: set[str]) -> ContextEntry | None:
    """Replace followers on lost nodes and fill missing ones; tell the primary. None if
    nothing changed."""
    keep = [m for m in entry.followers if m.node_id in live]
    if len(keep) == len(entry.followers) and len(keep) >= entry.follower_count:
        return None
    keep += await _replacements(directory, entry, keep, live, entry.epoch)
    if keep == list(entry.followers):
        return None
    fresh = [m for m in keep if m not in entry.followers]
    recruited, started = await _recruit(entry, fresh, directory.namespace, entry.epoch)
    keep = [m for m in keep if m in entry.followers] + recruited
    try:
        updated = ContextEntry.model_validate(
            open_reply(
                await directory.set_followers(
                    entry.name, entry.epoch, [m.model_dump() for m in keep]
                )
            )
        )
    except Exception:
        for a in started:  # recorded nowhere: they must not linger
            ray_module().kill(a, no_restart=True)
        raise
    primary = _get_actor(entry.primary.actor, directory.namespace)
    if primary is not None:
        try:
            await _call(primary, "replicate")
        except Exception as e:
            log.warning("context %r: primary not told of new followers: %s", entry.name, e)
    return updated
