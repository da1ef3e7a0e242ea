"""Context hosts: one process serving many contexts, each activated on demand.

A context is a logical actor: it always exists (its store is on a node's disk)
and is *activated* — its store opened, its guard, inbox and audit buffer made —
in a host process when a call reaches it, then *deactivated* (flushed and
closed) after it has been idle for ``idle_after`` seconds. The next call
activates it again; nothing is replayed, because a context keeps no state its
store does not hold (the client-id table and epochs included), so exactly-once
commits hold across any number of deactivations.

:class:`HostActor` is a plain class run as an async Ray actor named
``host:<name>`` (:func:`start_host`). Each active context in it is a whole
:class:`~actors.server.context_actor.ContextActor` object — the same code a
context running alone in its own actor process runs — with its own store
thread, group-commit inbox, guard and audit buffer, so one context's
commits stay serialized and batched exactly as alone, and a slow commit of one
occupies only its own store thread: the shared event loop keeps accepting the
others' calls. What a shared process gives up: a crash of the process (a
segfault, the OOM killer, ``kill -9``) takes every context active in it down
at once (Ray restarts the host and each is activated again by its next call),
and the contexts share its CPU, memory and Python GIL.

Calls reach a context through :meth:`HostActor.call` with the context's name
(the client's :class:`~actors.client.transport.Transport` does this for an
actor named ``host:…``, so a :class:`~actors.client.handle.ContextHandle` works
unchanged). A host past its budget (``max_active`` contexts, ``memory_budget``
bytes resident, ``cpu_budget`` cores over the last tick) takes no new
activations (``RequestError`` ``host_full``); contexts active already keep
serving. When the namespace has a context directory, the host reports its load
to it every tick, and :meth:`actors.cluster.directory_handle.DirectoryHandle.place_hosted`
places contexts over hosts by that report (docs/cluster.md, "Context hosts").

Kept as one module (over 600 lines) because the host actor, its handle and the
functions starting and activating through it are one contract: each call's actor
side and caller side sit together.

Ray is imported only when a function runs.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.joining import check_int, check_positive, check_text, ray_module
from actors.client.leader import directory_actor
from actors.client.lookup import read_entry
from actors.client.names import DEFAULT_NAMESPACE, host_actor
from actors.client.nodes import start_pinned
from actors.client.replies import error_doc, raise_error
from actors.client.transport import RetryPolicy
from actors.server.context_actor import ContextActor
from protocol.errors import CONTEXT_MOVED, HOST_FULL, MorphzError, RequestError
from storage import check_context_name

log = logging.getLogger("morphz.hosting")

MAX_CONCURRENCY = 10_000
"""Calls one host's event loop accepts at once (over all its contexts)."""
TICK = 1.0
"""Longest pause between two looks at idle contexts and two load reports."""
OPTIONS = frozenset(
    {
        "window",
        "history_keep",
        "create",
        "tenant",
        "project",
        "enforce",
        "governance_every",
        "governance_unused_ticks",
        "admission",
        "embedder",
    }
)
"""The constructor options of a context a host activates (ContextActor's)."""
ROUTED = frozenset(
    n for n in dir(ContextActor) if not n.startswith("_") and callable(getattr(ContextActor, n))
)
"""The context methods a host routes calls to: those a context actor offers over Ray."""

__all__ = [
    "HOST_FULL",
    "MAX_CONCURRENCY",
    "OPTIONS",
    "ROUTED",
    "HostActor",
    "HostHandle",
    "activate_hosted",
    "start_host",
]


def _rss() -> int:
    """This process's resident memory in bytes (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class _Slot:
    """One context this host has served: active (``ctx`` set) or idle."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    ctx: ContextActor | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    inflight: int = 0
    last_use: float = 0.0  # wall clock, for listings
    last_mono: float = 0.0  # monotonic, for idleness
    calls: int = 0
    activations: int = 0


class HostActor:
    """Serves many contexts of one node's store root in one process (see the module doc).

    *store_dir* is the store root (``<store_dir>/<context>`` as everywhere);
    *name* the host's name (its actor is ``host:<name>``); *idle_after* the
    seconds after which an idle context is deactivated (None: never);
    *max_active*, *memory_budget* (bytes resident) and *cpu_budget* (cores)
    the budget past which no new context is activated.
    """

    def __init__(
        self,
        store_dir: str,
        name: str,
        namespace: str = DEFAULT_NAMESPACE,
        idle_after: float | None = None,
        max_active: int | None = None,
        memory_budget: int | None = None,
        cpu_budget: float | None = None,
        report_capability: bytes | None = None,
    ) -> None:
        self._store_dir = store_dir
        self._report_capability = report_capability
        self._name = name
        self._namespace = namespace
        self._idle_after = idle_after
        self._max_active = max_active
        self._memory_budget = memory_budget
        self._cpu_budget = cpu_budget
        self._slots: dict[str, _Slot] = {}
        self._moved: set[str] = set()  # given away (release): calls are told to look again
        self._ticker: asyncio.Task[None] | None = None
        # an existing context's activation, and a first one that may create its store
        self._activation_ms: collections.deque[float] = collections.deque(maxlen=4096)
        self._creation_ms: collections.deque[float] = collections.deque(maxlen=4096)
        self._counts = {"activations": 0, "deactivations": 0, "refused": 0, "calls": 0}
        self._cpu = 0.0  # cores used over the last tick
        self._rate = 0.0  # calls per second over the last tick
        self._last = (time.monotonic(), time.process_time(), 0)
        self._directory: Any = None
        self._directory_looked = 0.0
        self._started_at = time.time()

    # -- activation ------------------------------------------------------------

    def _full(self) -> str | None:
        """Why this host takes no new activation now, or None."""
        active = sum(1 for s in self._slots.values() if s.ctx is not None)
        if self._max_active is not None and active >= self._max_active:
            return f"{active} contexts active (budget {self._max_active})"
        if self._memory_budget is not None and _rss() >= self._memory_budget:
            return f"{_rss() >> 20} MiB resident (budget {self._memory_budget >> 20} MiB)"
        if self._cpu_budget is not None and self._cpu >= self._cpu_budget:
            return f"{self._cpu:.2f} cores busy (budget {self._cpu_budget})"
        return None

    def _slot(self, context: object) -> _Slot:
        name = check_context_name(context)
        self._check_here(name)
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = _Slot(name)
        return slot

    def _check_here(self, name: str) -> None:
        """RequestError ``context_moved`` if this host gave *name* away (:meth:`release`)."""
        if name in self._moved:
            raise RequestError(
                f"context {name!r} is no longer served by host {self._name!r}",
                code=CONTEXT_MOVED,
            )

    async def _enter(self, slot: _Slot) -> ContextActor:
        """The active context of *slot* (activating it), counted as in use until
        :meth:`_leave`; a deactivation waits for every use to end."""
        self._ensure_ticker()
        ctx = slot.ctx
        if ctx is None:
            async with slot.lock:
                self._check_here(slot.name)  # released while this call waited
                ctx = slot.ctx
                if ctx is None:
                    ctx = await self._activate(slot)
        slot.inflight += 1
        slot.calls += 1
        self._counts["calls"] += 1
        return ctx

    def _leave(self, slot: _Slot) -> None:
        slot.inflight -= 1
        slot.last_use, slot.last_mono = time.time(), time.monotonic()

    async def _activate(self, slot: _Slot) -> ContextActor:
        why = self._full()
        if why is not None:
            self._counts["refused"] += 1
            if slot.activations == 0:  # a name never served here: nothing of it is kept
                self._slots.pop(slot.name, None)
            raise RequestError(f"host {self._name!r} takes no new context: {why}", code=HOST_FULL)
        started = time.perf_counter()
        options = {"create": False, **slot.options}
        timings = self._creation_ms if options["create"] else self._activation_ms
        # Opening waits for the store's lock and reads its meta: off the event loop.
        ctx = await asyncio.to_thread(
            ContextActor, self._store_dir, slot.name, namespace=self._namespace, **options
        )
        timings.append((time.perf_counter() - started) * 1000)
        ctx._ensure_worker()  # its governance task, if any, on this loop
        if ctx._open_error is not None and ctx._open_error.code == "store_locked":
            if await self._placed_elsewhere(slot.name):  # moved while this host was down
                ctx._stop_tasks()
                self._slots.pop(slot.name, None)
                self._moved.add(slot.name)
                self._check_here(slot.name)
        if ctx._open_error is None:
            slot.ctx = ctx
            slot.activations += 1
            slot.options["create"] = False  # it exists now: a reactivation only opens it
            self._counts["activations"] += 1
        else:  # answered its typed error by this call, then gone: nothing held, nothing kept
            self._slots.pop(slot.name, None)
        return ctx

    async def _deactivate(self, slot: _Slot, *, forget: bool) -> bool:
        """Flush and close *slot*'s context: new calls wait (then activate it again), the
        calls in flight finish first. True if it was active."""
        async with slot.lock:
            ctx, slot.ctx = slot.ctx, None
            if ctx is not None:
                while slot.inflight > 0:  # every submission answered = every commit durable
                    await asyncio.sleep(0.005)
                ctx._stop_tasks()
                await asyncio.to_thread(ctx._close_store)
                self._counts["deactivations"] += 1
            if forget and self._slots.get(slot.name) is slot:
                del self._slots[slot.name]
        return ctx is not None

    # -- the API -----------------------------------------------------------------

    async def activate(self, context: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Activate *context* with *options* (ContextActor's: ``create``, ``window``,
        ``tenant``, ``enforce``, ``admission`` …; kept for its reactivations, ``create``
        only for the first) and answer its handshake (``open_error`` set if it failed:
        ``host_full``, ``context_moved``, the store's own error …)."""
        try:
            slot = self._slot(context)
        except MorphzError as e:
            return {"open_error": error_doc(e)}
        if options is not None:
            if not isinstance(options, dict) or not set(options) <= OPTIONS:
                raise RequestError(
                    f"a hosted context's options are among {sorted(OPTIONS)}",
                    code="bad_argument",
                )
            if slot.ctx is None:
                slot.options = dict(options)
        try:
            ctx = await self._enter(slot)
        except MorphzError as e:  # host_full, context_moved: answered like a failed open
            return {"open_error": error_doc(e)}
        try:
            return await ctx.handshake()
        finally:
            self._leave(slot)

    async def call(
        self,
        context: str,
        method: str,
        args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Call *method* of *context* (activating it) with *args* and *kwargs*; answer what
        the context answers (a method of :class:`ContextActor`, :data:`ROUTED`)."""
        if not isinstance(method, str) or method not in ROUTED:
            raise RequestError(f"no context method {method!r}", code="bad_argument")
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs or {}, dict):
            raise RequestError("call takes a list of arguments and a dict", code="bad_argument")
        slot = self._slot(context)
        ctx = await self._enter(slot)
        try:
            if method == "close":
                return await self._close(slot, ctx, kwargs or {})
            result = getattr(ctx, method)(*args, **(kwargs or {}))
            if inspect.isawaitable(result):
                result = await result
            return result
        finally:
            self._leave(slot)

    async def _close(self, slot: _Slot, ctx: ContextActor, kwargs: dict[str, Any]) -> Any:
        """A caller's ``close``: the guard decides (a denial is audited by the context);
        allowed, the context is deactivated and forgotten."""
        if not ctx.guard.permits("admin", kwargs.get("capability")):
            return ctx.close(**kwargs)
        slot.inflight -= 1  # this call must not wait for itself
        try:
            await self._deactivate(slot, forget=True)
        finally:
            slot.inflight += 1
        return None

    async def deactivate(self, context: str, forget: bool = False) -> bool:
        """Flush and close *context* now (True if it was active); *forget* also drops what
        this host remembers of it (its options)."""
        slot = self._slots.get(check_context_name(context))
        if slot is None:
            return False
        return await self._deactivate(slot, forget=bool(forget))

    async def release(self, context: str, idle_only: bool = False) -> bool:
        """Give *context* away (the directory moves it to another host): from now on calls
        for it are answered ``context_moved``, so its handles ask the directory again; it
        is flushed and closed first if active (the calls in flight finish). With
        *idle_only* an active context (or one being activated) is kept: False."""
        name = check_context_name(context)
        slot = self._slots.get(name)
        if idle_only and slot is not None and (slot.ctx is not None or slot.lock.locked()):
            return False
        self._moved.add(name)
        if slot is not None:
            await self._deactivate(slot, forget=True)
        return True

    async def adopt(self, context: str) -> None:
        """Serve *context* again after a :meth:`release` (the directory moved it back)."""
        self._moved.discard(check_context_name(context))

    async def contexts(self) -> list[dict[str, Any]]:
        """Every context this host has served since it started: name, state (``active``
        / ``idle``), last use (wall clock, None if never called), calls, activations."""
        return [
            {
                "name": s.name,
                "state": "active" if s.ctx is not None else "idle",
                "last_use": s.last_use or None,
                "calls": s.calls,
                "activations": s.activations,
                "inflight": s.inflight,
            }
            for s in sorted(self._slots.values(), key=lambda s: s.name)
        ]

    async def load(self) -> dict[str, Any]:
        """This host's report: who it is, how many contexts are active and known, resident
        memory, CPU and call rate over the last tick, whether it is full, its counts and
        activation latency (p50 / p99 ms of the last 4096 activations of an existing
        context, off the loop's queue included; first activations that may create a store
        apart: ``creation_p50_ms``)."""
        self._ensure_ticker()
        ms = list(self._activation_ms)
        why = self._full()
        return {
            "host": self._name,
            "actor": host_actor(self._name),
            "node_id": self._node_id(),
            "store_dir": self._store_dir,
            "pid": os.getpid(),
            "active": sum(1 for s in self._slots.values() if s.ctx is not None),
            "known": len(self._slots),
            "rss": _rss(),
            "cpu": round(self._cpu, 3),
            "calls_per_s": round(self._rate, 1),
            "full": why,
            "idle_after": self._idle_after,
            **self._counts,
            "activation_p50_ms": _quantile(ms, 0.5),
            "activation_p99_ms": _quantile(ms, 0.99),
            "creation_p50_ms": _quantile(list(self._creation_ms), 0.5),
            "started_at": self._started_at,
        }

    async def ping(self) -> int:
        """A no-op call (the benchmark's bare round trip); answers the process id. It
        starts the tick, so a host reports to the directory from its start."""
        self._ensure_ticker()
        return os.getpid()

    async def shutdown_contexts(self) -> int:
        """Deactivate every context (before the host is stopped); how many were active."""
        done = 0
        for slot in list(self._slots.values()):
            done += await self._deactivate(slot, forget=True)
        return done

    # -- the tick: idle deactivation and the load report ---------------------------

    def _node_id(self) -> str:
        ray = ray_module()
        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""

    def _ensure_ticker(self) -> None:
        if self._ticker is not None and not self._ticker.done():
            return
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def _tick_loop(self) -> None:
        every = TICK if self._idle_after is None else min(TICK, max(0.05, self._idle_after / 4))
        while True:
            await asyncio.sleep(every)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("host %r: tick failed", self._name)

    async def tick(self) -> None:
        """Measure CPU and call rate, deactivate idle contexts, report to the directory."""
        now, cpu, calls = time.monotonic(), time.process_time(), self._counts["calls"]
        then, cpu0, calls0 = self._last
        if now > then:
            self._cpu = (cpu - cpu0) / (now - then)
            self._rate = (calls - calls0) / (now - then)
        self._last = (now, cpu, calls)
        if self._idle_after is not None:
            for slot in list(self._slots.values()):
                if (
                    slot.ctx is not None
                    and slot.inflight == 0
                    and now - slot.last_mono >= self._idle_after
                    and not slot.lock.locked()
                ):
                    await self._deactivate(slot, forget=False)
        await self._report()

    async def _placed_elsewhere(self, name: str) -> bool:
        """True if the namespace's directory places *name* on another host: a host that
        restarted after giving it away no longer remembers that (:meth:`release`)."""
        ray = ray_module()
        if not ray.is_initialized():
            return False
        try:
            directory = await asyncio.to_thread(directory_actor, self._namespace)
            if directory is None:
                return False
            entry = read_entry(await directory.get.remote(name))
        except (MorphzError, ValueError):  # no directory, or it does not know the context
            return False
        return bool(entry.primary.actor != host_actor(self._name))

    async def _report(self) -> None:
        """Send this host's load to the namespace's directory, if it has one (fire and forget)."""
        ray = ray_module()
        if not ray.is_initialized():
            return
        # The leading directory is looked up again every 10 ticks: a standby may lead now.
        if time.monotonic() - self._directory_looked > 10 * TICK:
            self._directory_looked = time.monotonic()
            self._directory = await asyncio.to_thread(directory_actor, self._namespace)
        if self._directory is not None:
            self._directory.report_host.remote(await self.load(), self._report_capability)


class HostHandle:
    """A picklable handle of a running context host: its contexts' handles, its load."""

    def __init__(self, actor: Any, name: str, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.actor = actor
        self.name = name
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"HostHandle({self.name!r}, namespace={self.namespace!r})"

    def context(
        self,
        name: str,
        *,
        create: bool = True,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        capability: bytes | None = None,
        **options: Any,
    ) -> ContextHandle:
        """Activate context *name* on this host (creating it unless ``create=False``) and
        answer its handle. *options* are :func:`~actors.server.connect.connect`'s
        context options (``window``, ``tenant``, ``enforce``, ``admission`` …)."""
        return activate_hosted(
            self.actor,
            self.name,
            name,
            namespace=self.namespace,
            retry=retry,
            timeout=timeout,
            capability=capability,
            options={"create": bool(create), **options},
        )

    def load(self) -> dict[str, Any]:
        """The host's load report (:meth:`HostActor.load`)."""
        return dict(ray_module().get(self.actor.load.remote()))

    def contexts(self) -> list[dict[str, Any]]:
        """What the host has served (:meth:`HostActor.contexts`)."""
        return list(ray_module().get(self.actor.contexts.remote()))

    def deactivate(self, name: str, *, forget: bool = False) -> bool:
        """Flush and close context *name* now; True if it was active."""
        check_context_name(name)
        return bool(ray_module().get(self.actor.deactivate.remote(name, forget)))

    def shutdown(self, *, wait: float = 30.0) -> None:
        """Deactivate every context, then stop the host for good; returns once its name is
        free (at most *wait* s more), so the directory sees it gone."""
        ray = ray_module()
        try:
            ray.get(self.actor.shutdown_contexts.remote(), timeout=wait)
        finally:
            ray.kill(self.actor, no_restart=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                ray.get_actor(host_actor(self.name), namespace=self.namespace)
            except ValueError:
                return
            time.sleep(0.05)


def activate_hosted(
    actor: Any,
    host: str,
    name: str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    capability: bytes | None = None,
    options: dict[str, Any] | None = None,
) -> ContextHandle:
    """Activate context *name* on the host actor *actor* (named ``host:<host>``) and answer
    its handle; the typed error of a failed open (``NotFound`` with ``create=False`` …)."""
    check_context_name(name)
    opts = dict(options or {})
    unknown = set(opts) - OPTIONS
    if unknown:
        raise RequestError(f"unknown context options {sorted(unknown)}", code="bad_argument")
    embedder = opts.get("embedder")
    if embedder is not None:
        opts["embedder"] = embedder.to_dict()
    opts = {k: v for k, v in opts.items() if v is not None}
    ray = ray_module()
    info = ray.get(actor.activate.remote(name, opts))
    if info["open_error"] is not None:
        raise_error(info["open_error"])
    for what in ("tenant", "project"):
        want = opts.get(what)
        if want is not None and info[what] != want:
            raise RequestError(
                f"context {name!r} belongs to {what} {info[what]!r}, not {want!r}",
                code="scope_mismatch",
            )
    return ContextHandle(
        actor,
        name,
        namespace=namespace,
        retry=retry,
        timeout=timeout,
        capability=capability,
        ray_name=host_actor(host),
    )


def start_host(
    name: str,
    *,
    store_dir: str | os.PathLike[str],
    node_id: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    idle_after: float | None = None,
    max_active: int | None = None,
    memory_budget: int | None = None,
    cpu_budget: float | None = None,
    lifetime: str | None = None,
    capability: bytes | None = None,
) -> HostHandle:
    """Get or create the context host *name* (actor ``host:<name>`` in *namespace*)
    serving contexts of *store_dir* (a path on *node_id*, default this node).

    ``lifetime="detached"`` lets it outlive this process. *capability* is the operator's
    admin token its load reports carry (a closed directory takes no report without one:
    :mod:`actors.cluster.directory_admin`). Ray restarts a host that
    dies; its contexts are activated again by their next calls. A host that runs
    already is answered as it is.
    """
    check_text(name, "host name")
    check_context_name(name)  # the same alphabet: it is part of an actor name
    if not isinstance(store_dir, (str, os.PathLike)):
        raise RequestError("store_dir must be a path", code="bad_argument")
    where = os.path.abspath(os.fspath(store_dir))
    check_text(namespace, "namespace")
    if idle_after is not None:
        check_positive(idle_after, "idle_after")
    if max_active is not None:
        check_int(max_active, "max_active", 1)
    if memory_budget is not None:
        check_int(memory_budget, "memory_budget", 1)
    if cpu_budget is not None:
        check_positive(cpu_budget, "cpu_budget")
    actor = start_pinned(
        HostActor,
        name=host_actor(name),
        namespace=namespace,
        node_id=node_id,
        lifetime=lifetime,
        max_concurrency=MAX_CONCURRENCY,
    ).remote(where, name, namespace, idle_after, max_active, memory_budget, cpu_budget, capability)
    ray_module().get(actor.ping.remote())
    return HostHandle(actor, name, namespace)
