"""Hosting one context in an actor process: opening it, the store thread, the guard,
the inbox, the audit buffer, the background governance task, introspection and close.

:class:`ContextHost` is the base of :class:`~actors.server.context_actor.ContextActor`,
which adds the methods callers use. Every store access runs on one dedicated
thread (a ``ThreadPoolExecutor(1)``), so accesses are serialized and the event
loop keeps accepting calls while a write is being fsynced.

While it holds the store, an actor running under Ray *advertises* itself in
the context's directory: :data:`ADVERT_FILE` (``actor.json``) holds the Ray
address of its cluster, its namespace, node and process id, so a command that
finds the store locked can reach the actor instead
(:func:`~actors.client.lookup.advertised`). The file is written after the open
and removed on close; one left by a killed actor is stale and harmless (the
lock is free again, and a restarted actor rewrites it).

The same object serves a context alone in its actor process and as one of many
in a context host (:mod:`actors.server.hosting`), which is why closing is split
into :meth:`ContextHost._stop_tasks` (on the event loop) and
:meth:`ContextHost._close_store` (off it). Kept as one module (over 600 lines)
because everything a served context owns is opened, run and closed together here.

Ray is not imported here except by :meth:`ContextHost.node_id`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from actors.client.names import ADVERT_FORMAT, ContextEntry, advert_path
from actors.client.nodes import process_state as read_process
from actors.client.replies import error_doc, failed, ok
from actors.server.guard import (
    DEFAULT_PROJECT,
    DEFAULT_TENANT,
    Guard,
    check_scope_name,
    guarded,
    holder_of,
    settle_scope,
)
from actors.server.inbox import MAX_BATCH, AuditBuffer, Inbox
from actors.server.intake import Intake
from actors.server.metrics import ContextMetrics
from actors.server.settings import policy_of, settle
from protocol.errors import MorphzError, NotFound, RequestError, StoreError, StoreLocked
from protocol.governance import (
    MAX_AUDIT_TEXT,
    WORKER,
    AdmissionPolicy,
    DefaultPolicy,
    PassCursor,
    PassPlan,
    audit_entry,
    audit_template,
    check_every,
    check_scan,
    plan_pass,
    printable,
)
from service.context import Context
from service.governance import SCAN_BUDGET_SECONDS, apply_pass, record_audit, scan_deadline
from service.store import open_context
from service.transactions import commit_group
from storage.replication.codec import open_denials, replication_key
from storage.replication.recording import check_retain

T = TypeVar("T")
log = logging.getLogger("morphz.context_actor")

LOCK_WAIT = 5.0
"""Seconds a starting actor waits for the store's writer lock (a predecessor may be exiting)."""


class Replicating(Protocol):
    """What the host keeps of a replicated primary's shipping (the cluster side's
    :class:`~actors.cluster.replication.Replicator`): the directory entry it ships
    under, :meth:`refresh`, which re-reads that entry and adopts new followers (and
    fences this primary if the entry names another), and :meth:`fenced`, the ``fenced``
    error every call answers once this primary knows it was replaced (None until then),
    and :meth:`hold_lease`, which returns only if a read may be served now (the primary's
    read lease is live, or renewed by its followers), else raises why not; and
    :meth:`progress`: the last batch written and acknowledged and how often followers
    were caught up (from the log, by snapshot)."""

    @property
    def entry(self) -> ContextEntry: ...

    def refresh(self) -> None: ...

    def fenced(self) -> MorphzError | None: ...

    def hold_lease(self) -> None: ...

    def progress(self) -> dict[str, Any]: ...


class Replication(Protocol):
    """The hook replication reaches a context's host through, given to the actor when
    it is created (the cluster side gives :data:`actors.cluster.replication.REPLICATION`
    for the contexts it places; without one a context is served alone).

    :meth:`check_not_replaced` raises ``RequestError`` ``fenced`` when another actor
    has replaced this one as the context's primary (it must not open the store);
    :meth:`enable` wraps the open context's store for replication when this actor is
    a replicated context's primary, and answers None when the context is not
    replicated. Both run only under Ray, on the store thread for :meth:`enable`.
    """

    def check_not_replaced(self, name: str, namespace: str | None) -> None: ...

    def enable(self, ctx: Context, name: str, namespace: str | None) -> Replicating | None: ...


def _leased(replicator: Replicating, call: Callable[[], T]) -> T:
    replicator.hold_lease()
    return call()


class ContextHost:
    """Hosts one context in this process for :class:`~actors.server.context_actor.ContextActor`.

    Opens the context (retrying a locked store for *lock_wait* seconds; a
    failure is kept and answered to every call), settles its scope, and owns
    what serving it needs: the store thread, the capability :class:`Guard`, the
    group-commit :class:`~actors.server.inbox.Inbox`, the :class:`~actors.server.inbox.AuditBuffer`
    and the background governance task. See :class:`ContextActor` for the
    arguments; *namespace* is the Ray namespace the actor is named in (written
    into its advert, :data:`ADVERT_FILE`).
    """

    def __init__(
        self,
        store_dir: str,
        name: str,
        window: int | None = None,
        history_keep: int | None = None,
        create: bool = True,
        max_batch: int = MAX_BATCH,
        lock_wait: float = LOCK_WAIT,
        tenant: str | None = None,
        project: str | None = None,
        enforce: bool = False,
        governance_every: float | None = None,
        governance_unused_ticks: int | None = None,
        admission: AdmissionPolicy | None = None,
        namespace: str | None = None,
        embedder: dict[str, Any] | None = None,
        replication: Replication | None = None,
        replication_log: int | None = None,
    ) -> None:
        self._store_dir = store_dir
        self._replication = replication
        self._name = name
        self._namespace = namespace  # the Ray namespace it is named in, for the advert
        self._started_at = time.time()  # the age `morphz actors` shows
        self.guard = Guard(
            store_dir,
            name,
            tenant=tenant or DEFAULT_TENANT,
            project=project or DEFAULT_PROJECT,
            enforce=bool(enforce),
        )
        self._policy: AdmissionPolicy = DefaultPolicy()
        self._every: float | None = None
        self._unused_ticks: int | None = None
        self._worker: asyncio.Task[None] | None = None
        self._cursor: PassCursor | None = None  # where the last good pass left off
        self._closing = False
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="morphz-context")
        # Content scans (the pass's plan, the quarantine scan's observations) read a
        # snapshot on their own thread, so a big or hostile text never holds up a commit.
        self._scan_executor = ThreadPoolExecutor(1, thread_name_prefix="morphz-scan")
        self.intake = Intake()  # byte budgets of submissions; big ones decoded off the loop
        self.metrics = ContextMetrics(name, namespace)
        self.guard.metrics = self.metrics
        self._inbox = Inbox(
            self._executor,
            lambda items: commit_group(self._context(), items),
            max_batch,
            self.metrics,
        )
        self._indexing = False  # set by the first search: the index lag is sampled from then on
        self.audit_buffer = AuditBuffer(
            self._executor,
            lambda entries: record_audit(self._context().backend, entries),
            lambda: self._ctx is not None,
        )
        self.replicator: Replicating | None = None  # set once the store is replicated
        self._ctx: Context | None = None
        self._open_error: MorphzError | None = None
        self.settings: dict[str, Any] = {}
        """What this context is served with (:mod:`actors.server.settings`), once open."""
        try:  # checked before the store is touched: a bad argument changes nothing
            if governance_every is not None:
                check_every(governance_every)
            check_scan(governance_unused_ticks, 3)
            if replication_log is not None:
                check_retain(replication_log)
            if admission is not None and (
                not isinstance(getattr(admission, "name", None), str)
                or not callable(getattr(admission, "review", None))
            ):
                raise RequestError(
                    "admission must be a policy with a name and a review method",
                    code="bad_argument",
                )
        except MorphzError as e:
            self._open_error = e
        else:
            given = {
                "governance_every": (
                    None if governance_every is None else check_every(governance_every)
                ),
                "governance_unused_ticks": governance_unused_ticks,
                "admission": admission,
                "embedder": embedder,
                "enforce": bool(enforce),
                "replication_log": replication_log,
            }
            self._open(window, history_keep, create, lock_wait, tenant, project, given)
        if self._ctx is not None:
            self._use_embedder(self.settings.get("embedder"))
        self._ensure_worker()  # under Ray the constructor runs on the actor's event loop
        self._sampler = self.metrics.start_sampler(self._sample_metrics)

    def _open(
        self,
        window: int | None,
        history_keep: int | None,
        create: bool,
        lock_wait: float,
        tenant: str | None,
        project: str | None,
        given: dict[str, Any],
    ) -> None:
        """Open the context, settle what it is served with (the *given* arguments merged
        with its recorded settings, :func:`~actors.server.settings.settle`, recorded if
        they changed) and its scope; a failure is kept in ``_open_error``."""
        try:  # refused before a context is created with them in its meta
            for value, what in ((tenant, "tenant"), (project, "project")):
                if value is not None:
                    check_scope_name(value, what)
        except MorphzError as e:
            self._open_error = e
            return
        if self._replaced():
            return
        deadline = time.monotonic() + lock_wait
        while True:
            try:
                # A context created here records its scope in its meta too (the embedded
                # API's audit entries and the frames' envelopes read it from there).
                self._ctx = open_context(
                    self._store_dir,
                    self._name,
                    window=window,
                    history_keep=history_keep,
                    create=create,
                    tenant=tenant or DEFAULT_TENANT,
                    project=project or DEFAULT_PROJECT,
                )
            except StoreLocked as e:
                # The previous incarnation of this actor may still be exiting.
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                self._open_error = e
            except MorphzError as e:
                self._open_error = e
            break
        if self._ctx is None:
            return
        try:
            ctx = self._ctx
            meta = ctx.backend.read(lambda v: v.meta())
            admission = given["admission"]
            self.settings = settle(meta.settings, **given)
            self._every = self.settings["governance_every"]
            self._unused_ticks = self.settings["governance_unused_ticks"]
            self._policy = (
                admission if admission is not None else policy_of(self.settings["admission"])
            )
            # A copy of the store (a follower's, a restored one) has no scope file: its
            # meta holds the tenant and project, its settings the enforcement.
            scope = settle_scope(
                self._store_dir,
                self._name,
                tenant or meta.tenant,
                project or meta.project,
                self.settings["enforce"],
            )
            self.settings["enforce"] = bool(scope["enforce"])  # a scope file may have it on
            ctx.record_settings(self.settings)
            self.guard.tenant, self.guard.project = scope["tenant"], scope["project"]
            self.guard.enforce = scope["enforce"]
            if self.guard.enforce:
                self.guard.key()
        except (MorphzError, OSError, ValueError) as e:
            self._ctx.close()
            self._ctx = None
            self._open_error = (
                e
                if isinstance(e, MorphzError)
                else RequestError(f"cannot settle the scope: {e}", code="scope_error")
            )
            return
        self._advertise()
        self._replicate_on_open()

    def _replaced(self) -> bool:
        """True (and the open failed with ``fenced``) if this actor was a replicated
        context's primary and another has replaced it: it must not open the store."""
        ray = sys.modules.get("ray")
        if self._replication is None or ray is None or not ray.is_initialized():
            return False
        try:
            self._replication.check_not_replaced(self._name, self._namespace)
        except MorphzError as e:
            self._open_error = e
            return True
        return False

    def _replicate_on_open(self) -> None:
        """Under Ray: wrap the store for replication if the directory says this actor is a
        replicated context's primary; a replaced (fenced) primary keeps no store open."""
        ray = sys.modules.get("ray")
        hook = self._replication
        if hook is None or ray is None or not ray.is_initialized() or self._ctx is None:
            return
        try:
            self.replicator = hook.enable(self._ctx, self._name, self._namespace)
        except MorphzError as e:
            self._unadvertise()
            self._ctx.close()
            self._ctx = None
            self._open_error = e
        except Exception as e:  # a Ray failure while reaching the directory or followers
            log.warning("context %r: cannot set up replication", self._name, exc_info=True)
            self._unadvertise()
            self._ctx.close()
            self._ctx = None
            self._open_error = StoreError(
                f"cannot set up the replication of context {self._name!r}: {e}",
                code="replication_error",
            )

    async def follower_denials(self, message: bytes) -> bytes:
        """Write the reads a follower of this context denied into its audit log, chained
        and rate-limited like this primary's own denials (``served_by: "follower"``, the
        follower's actor and node, its time). *message* is the follower's, MACed under the
        context's replication key (:func:`storage.replication.codec.seal_denials`): from
        anyone else it is ``bad_mac`` and writes nothing. How many entries it held."""
        try:
            follower, node, denials = open_denials(replication_key(self._name), message)
            for d in denials:
                extra = (
                    {"claimed": printable(d["claimed"][:MAX_AUDIT_TEXT])} if d["claimed"] else {}
                )
                entry = audit_entry(
                    d["method"], d["op"], holder=d["holder"], allowed=False, why=d["why"],
                    at=d["at"], context=self._name, tenant=self.guard.tenant,
                    served_by="follower", follower=printable(follower[:200]),
                    node=printable(node[:200]), **extra,
                )  # fmt: skip
                entry["count"] = d["count"]
                await self.audit_buffer.deny(entry)
            return ok(len(denials))
        except MorphzError as e:
            return failed(e)

    async def replicate(self) -> bytes:
        """Re-read this context's directory entry: start replicating, or adopt new followers.

        Open to every caller, like :meth:`handshake`: it reveals no content and
        acts only on what the context directory (trusted) says; the supervisor
        (``actors.cluster.failover``) calls it after replacing a follower."""

        def run(ctx: Context) -> dict[str, Any]:
            replicator = self.replicator
            if replicator is None and self._replication is not None:
                self.replicator = replicator = self._replication.enable(
                    ctx, self._name, self._namespace
                )
            elif replicator is not None:
                replicator.refresh()
            if replicator is None:
                return {"follower_count": 0, "followers": []}
            return {
                "follower_count": replicator.entry.follower_count,
                "epoch": replicator.entry.epoch,
                "followers": [m.actor for m in replicator.entry.followers],
                **replicator.progress(),
            }

        return await self._reply(run)

    def _use_embedder(self, embedder: dict[str, Any] | None) -> None:
        """With an embedder config (``EmbedderConfig.to_dict()``), search is hybrid and the
        index workers (words and vectors) start now, so embedding keeps up with commits
        from the start; a bad config is kept as the open error."""
        if embedder is None or self._ctx is None:
            return
        from adapters.embeddings import EmbedderConfig

        try:
            self._ctx.use_embedder(EmbedderConfig.from_dict(embedder))
            self._ctx.searcher.start_worker()
            self._indexing = True
        except MorphzError as e:
            self._unadvertise()
            self._ctx.close()
            self._ctx = None
            self._open_error = e

    def _keep_indexed(self, ctx: Context) -> None:
        """Keep the search indexes current from worker threads from now on (idempotent):
        the first call that reads them starts the workers."""
        ctx.searcher.start_worker()
        self._indexing = True

    def _advertise(self) -> None:
        """Write :data:`ADVERT_FILE` if this runs as a Ray actor (a failure is only logged)."""
        ray = sys.modules.get("ray")  # never imported here: an actor has imported it already
        if ray is None or not ray.is_initialized():
            return
        try:
            rc = ray.get_runtime_context()
            if rc.get_actor_id() is None or not self._namespace:  # not a named context actor
                return
            doc = {
                "format": ADVERT_FORMAT,
                "context": self._name,
                "store_dir": self._store_dir,
                "address": str(rc.gcs_address),
                "namespace": self._namespace,
                "actor": str(rc.get_actor_name() or ""),  # ctx:<name>, or its host:<name>
                "node_id": str(rc.get_node_id()),
                "pid": os.getpid(),
            }
            path = advert_path(self._store_dir, self._name)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except Exception:
            log.warning("context %r: cannot advertise the actor", self._name, exc_info=True)

    def _unadvertise(self) -> None:
        """Remove :data:`ADVERT_FILE` if this process wrote it."""
        path = advert_path(self._store_dir, self._name)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            if isinstance(doc, dict) and doc.get("pid") == os.getpid():
                os.unlink(path)
        except (OSError, ValueError):
            pass

    @property
    def _tenant(self) -> str:
        return self.guard.tenant

    @property
    def _project(self) -> str:
        return self.guard.project

    # -- plumbing -----------------------------------------------------------

    def _context(self) -> Context:
        if self._ctx is None:
            assert self._open_error is not None
            raise self._open_error
        fenced = None if self.replicator is None else self.replicator.fenced()
        if fenced is not None:
            # Replaced: its state may miss acknowledged commits of the new primary, so it
            # serves no read either; the caller's handle follows the promotion.
            raise fenced
        return self._ctx

    async def _run(self, fn: Callable[..., T], *args: Any, read: bool = False) -> T:
        """Run *fn(context, *args)* on the store thread; a *read* of a replicated primary
        first holds its read lease (:meth:`Replicating.hold_lease`: renewed with the
        followers if it lapsed, refused if this primary was replaced)."""
        ctx = self._context()
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, ctx, *args)
        if read and self.replicator is not None:
            call = functools.partial(_leased, self.replicator, call)
        return await loop.run_in_executor(self._executor, call)

    async def _reply(self, fn: Callable[..., Any], *args: Any, read: bool = False) -> bytes:
        try:
            return ok(await self._run(fn, *args, read=read))
        except MorphzError as e:
            return failed(e)

    async def _audit_now(self, entries: list[dict[str, Any]]) -> None:
        """Append *entries* durably before returning; concurrent appends share one write."""
        self._context()
        await self.audit_buffer.append(entries)

    def _template(self, method: str, capability: Any) -> dict[str, Any]:
        """The audit template of a governance call (its decisions fill the rest)."""
        return audit_template(
            method, holder=holder_of(capability), context=self._name, tenant=self._tenant
        )

    # -- the background governance task ----------------------------------------

    def _ensure_worker(self) -> None:
        """Start the periodic governance task if configured and not running (needs a loop)."""
        if self._every is None or self._ctx is None or self._closing:
            return
        if self._worker is not None and not self._worker.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on an event loop yet: the first call starts it
        self._worker = loop.create_task(self._governance_loop())

    async def _governance_loop(self) -> None:
        assert self._every is not None
        while True:
            await asyncio.sleep(self._every)
            await self._governance_pass()

    def _plan(self, ctx: Context) -> PassPlan:
        cursor, policy, unused = self._cursor, self._policy, self._unused_ticks
        stop = scan_deadline(SCAN_BUDGET_SECONDS)
        return ctx.backend.read(
            lambda v: plan_pass(v, policy=policy, unused_ticks=unused, cursor=cursor, stop=stop)
        )

    async def _scan(self, fn: Callable[..., T], *args: Any) -> T:
        """Run *fn(context, *args)* on the scan thread (a read: it never holds the store thread)."""
        ctx = self._context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._scan_executor, functools.partial(fn, ctx, *args))

    def _pass(self, ctx: Context, plan: PassPlan) -> dict[str, Any]:
        audit = audit_template(
            "governance_pass", holder=WORKER, context=self._name, tenant=self._tenant
        )
        return apply_pass(ctx.backend, plan, audit=audit)

    async def _governance_pass(self) -> dict[str, Any] | None:
        """One unattended pass; a failure is logged, audited, survived.

        Decided on a read snapshot on the scan thread (commits go on meanwhile)
        from the last pass's cursor, so it looks only at what changed, scanning
        observations for at most :data:`SCAN_BUDGET_SECONDS` (the next pass goes
        on from there); then, only if there is something to write, a write job
        on the store thread re-checks each decision against the current frame
        and applies it.
        """
        try:
            plan = await self._scan(self._plan)
            if plan.writes:
                report = await self._run(self._pass, plan)
            else:  # nothing to write: no store access, no second job
                report = self._pass(self._context(), plan)
            self._cursor = report["cursor"]
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.metrics.governance_pass(ok=False)
            log.exception("governance pass of context %r failed", self._name)
            why = f"{type(e).__name__}: {e}"
            await self.audit_buffer.append_quietly(
                self.guard.entry(
                    "governance_pass", "admin", WORKER, allowed=False, why=why, outcome="error"
                )
            )
            return None
        self.metrics.governance_pass(ok=True)
        return report

    async def _sample_metrics(self) -> None:
        """Set the gauges: inbox depth, and the index lag once the index worker runs."""
        self.metrics.inbox_depth(self._inbox.pending)
        if self._indexing and self._ctx is not None and not self._closing:
            self.metrics.index_lag(await self._run(lambda ctx: ctx.searcher.index.lag()))

    # -- introspection (plain values, no store access) ------------------------

    @guarded("admin", raises=True)
    async def stats(self) -> dict[str, int]:
        """The actor's counts since its process started, and what waits now.

        One object holds every count (:class:`actors.server.metrics.ContextStats`,
        fed by the metrics recorder): ``batches`` (LMDB writes that committed
        submissions), ``transactions`` (the submissions they decided),
        ``largest_batch``, ``writes`` (every group write, also those carrying only
        other calls' writes), ``joined`` (observations, claims and deliveries written
        in a group write), ``held`` (conflict rejections held for a turn on a hot
        frame), ``wire_rejections`` (payloads that did not decode),
        ``governance_passes`` / ``governance_errors``, ``commits``,
        ``rejections``, ``rebases``, ``duplicates`` and (once sampled)
        ``index_lag``; ``pending`` is what waits now, ``held_bytes`` the transaction
        bytes in flight (:mod:`actors.server.intake`), ``audit_writes`` the durable
        audit writes (denials are batched past a few per caller).
        """
        return {
            **self.metrics.stats.as_dict(),
            "pending": self._inbox.pending,
            "held_bytes": self.intake.held,
            "audit_writes": self.audit_buffer.writes,
        }

    @guarded("admin", raises=True)
    async def describe(self) -> dict[str, Any]:
        """Who serves the context: name, store directory, node, process, open error."""
        return {
            **(await self.handshake()),
            "pid": os.getpid(),
            "denials": self.metrics.stats.denials,
            "governance_every": self._every,
            "admission": self._policy.name,
        }

    async def handshake(self, capability: Any = None) -> dict[str, Any]:
        """What :func:`~actors.server.connect.connect` checks, open to every caller (no
        content).

        Name, store directory, node, open error, tenant, project, enforcement, and the
        process (pid, start time) that ``morphz actors`` lists.
        """
        self._ensure_worker()
        return {
            "name": self._name,
            "store_dir": self._store_dir,
            "node_id": self.node_id(),
            "open_error": None if self._open_error is None else error_doc(self._open_error),
            "tenant": self._tenant,
            "project": self._project,
            "enforce": self.guard.enforce,
            "pid": os.getpid(),
            "started_at": self._started_at,
        }

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def process_state(self, pid: int) -> bytes:
        """A reply envelope: ``[state letter, CPU seconds]`` of process *pid* on this actor's
        node (:func:`~actors.client.nodes.process_state`), or None if it has no such process.
        What the supervisor asks a node-local actor before it declares that node's primary
        hung (answered by the ``liveness`` group's thread, as :meth:`pid`)."""
        try:
            found = read_process(pid)
        except MorphzError as e:
            return failed(e)
        except (OSError, ValueError) as e:
            return failed(StoreError(f"process {pid}: {e}", code="no_process_state"))
        return ok(None if found is None else list(found))

    def node_id(self) -> str:
        """The id of the Ray node the actor runs on ('' outside Ray)."""
        import ray

        if not ray.is_initialized():
            return ""
        return str(ray.get_runtime_context().get_node_id())

    @guarded("admin")
    def close(self) -> None:
        """Close the store (the actor is unusable afterwards); for tests and shutdown.

        The background governance task stops first; a pass in progress finishes.
        The context's search index (and its worker) closes with the context.
        """
        self._close_store()

    def _close_store(self) -> None:
        """:meth:`close` without the capability check: what a context host runs when it
        deactivates the context (:mod:`actors.server.hosting`)."""
        self._stop_tasks()
        self.audit_buffer.drain()  # the denials still waiting for their batch
        self._scan_executor.shutdown(wait=True)
        self.intake.shutdown()
        self._executor.shutdown(wait=True)
        if self._ctx is not None:
            self._unadvertise()  # while the lock is still held: a successor writes after
            self._ctx.close()
            self._ctx = None
            self._open_error = NotFound(f"context {self._name!r} is closed")

    def _stop_tasks(self) -> None:
        """Stop the background governance task and the metrics sampler (on their loop's
        thread: a host calls it there before closing the store on another thread)."""
        self._closing = True
        self.metrics.flush()  # what was recorded since the sampler's last flush
        if self._sampler is not None and not self._sampler.done():
            try:
                self._sampler.cancel()
            except RuntimeError:  # its event loop is gone
                pass
        if self._worker is not None and not self._worker.done():
            try:
                self._worker.cancel()
            except RuntimeError:  # its event loop is gone (plain-class tests)
                pass
