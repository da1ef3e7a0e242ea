"""The context actor: one cognitive context served to a cluster, commits group-committed.

:class:`ContextActor` is a plain class; :mod:`actors.client` runs it as an async
Ray actor (``ray.remote(ContextActor)``). It owns the context's LMDB store
exclusively (the store's writer lock), keeps no state that the store does not
hold, and so restarts by reopening the store: nothing is replayed.

Concurrency: the event loop accepts calls; every store access runs on one
dedicated thread (a ``ThreadPoolExecutor(1)``), so accesses are serialized and
the loop keeps accepting submissions while a write is being fsynced.
Submissions queue up, and one flusher task commits everything queued (at most
:data:`MAX_BATCH`) in a single durable LMDB write with
:meth:`service.context.Context.commit_many`. A submission is answered only
after that write returned: an acknowledged commit is durable (R44).

Payloads: ``submit`` takes the msgpack wire form of one transaction
(:func:`protocol.wire.tx_to_msgpack`, client id inside the transaction) and
answers ``pack(receipt.to_dict())``. A payload that does not decode gets a
rejected receipt with the error code ``wire_error`` and writes nothing (R45).
Other store methods answer with the envelope of :mod:`actors.replies`.

Governance (docs/governance.md, docs/permissions.md): denials, exports,
imports and governance decisions are appended to the store's durable audit
table before the call is answered; ``admit``, ``review``, ``pending`` and
``quarantine_scan`` run on the store thread like every write; with
``governance_every`` a background task runs admission and the quarantine scan
unattended.

Ray is not imported here except by :meth:`ContextActor.node_id`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from actors.guard import (
    DEFAULT_PROJECT,
    DEFAULT_TENANT,
    check_scope_name,
    grant_key,
    settle_scope,
)
from actors.replies import error_doc, failed, ok
from protocol import capabilities
from protocol.capabilities import Capability, PermissionDenied
from protocol.engine import observe
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    RequestError,
    StoreLocked,
    WireError,
)
from protocol.forms import Symbol, from_plain
from protocol.governance import (
    MAX_AUDIT_PAGE,
    WORKER,
    AdmissionPolicy,
    DefaultPolicy,
    PassCursor,
    PassPlan,
    apply_pass,
    audit_entry,
    audit_template,
    check_every,
    check_scan,
    plan_pass,
    record_audit,
    run_admission,
    run_quarantine_scan,
    run_review,
)
from protocol.ids import is_event_id
from protocol.receipts import OpError, Receipt
from protocol.tx import ContextTx, Derive
from protocol.view import ReadView, WriteView
from protocol.wire import pack, tx_from_msgpack
from service.context import Context, new_event_id
from service.store import open_context

T = TypeVar("T")
log = logging.getLogger("morphz.context_actor")

LOCK_WAIT = 5.0
"""Seconds a starting actor waits for the store's writer lock (a predecessor may be exiting)."""
MAX_BATCH = 256
"""Most transactions one group commit decides in one LMDB write."""
MAX_EXPORT_PAGE = 5000
"""Most log records one :meth:`ContextActor.export` page carries."""
MAX_OBSERVE_BATCH = 1024
"""Most observations one ``observe_many`` call records."""
MAX_SNAPSHOT_FRAMES = 1024
"""Most frames one ``snapshot`` call reads."""
MAX_COMPILERS = 64
"""Most (session, configuration) compilers one actor keeps (oldest dropped first)."""
MAX_AUDIT_BATCH = 1024
"""Most audit entries one durable audit write carries (denials are group-committed)."""
MAX_VERIFIED = 1024
SEARCH_CATCH_UP = 2.0
"""Seconds a search waits for the index to reflect what was committed before it."""
"""Most verified capability tokens one actor caches (expiry is still checked per call)."""

OPERATION_OF: dict[str, str] = {}
"""Each guarded method's operation (read, commit, recall, admin); filled by :func:`guarded`."""


def guarded(op: str, *, raises: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """Check the call's capability for *op* before running the method (when enforcing).

    The method gains a keyword argument ``capability`` (token bytes). A denial
    is written to the durable audit table, then answered as
    ``failed(PermissionDenied)``, or raised when *raises* (methods that answer
    plain values); nothing else runs.
    """

    def wrap(fn: Callable[..., Any]) -> Any:
        OPERATION_OF[fn.__name__] = op
        sig = inspect.signature(fn)
        wants = "capability" in sig.parameters  # the method reads the token itself
        params = list(sig.parameters.values())
        if not wants:
            params.append(
                inspect.Parameter("capability", inspect.Parameter.KEYWORD_ONLY, default=None)
            )
        method: Any
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def method(
                self: ContextActor, *args: Any, capability: Any = None, **kwargs: Any
            ) -> Any:
                self._ensure_worker()
                refused = self._authorize(op, fn.__name__, capability)
                if refused is not None:
                    denied, entry = refused
                    await self._audit_quietly(entry)  # durable before the denial is answered
                    if raises:
                        raise denied
                    return failed(denied)
                if wants:
                    kwargs["capability"] = capability
                return await fn(self, *args, **kwargs)
        else:

            @functools.wraps(fn)
            def method(
                self: ContextActor, *args: Any, capability: Any = None, **kwargs: Any
            ) -> Any:
                refused = self._authorize(op, fn.__name__, capability)
                if refused is not None:
                    self._audit_blocking(refused[1])
                    raise refused[0]
                return fn(self, *args, **kwargs)

        # Ray reads an actor method's signature from the innermost ``__wrapped__``:
        # drop it, so that the ``capability`` parameter stays visible.
        del method.__wrapped__
        method.__signature__ = sig.replace(parameters=params)
        return method

    return wrap


def wire_rejection(message: str, *, version: int, tick: int) -> Receipt:
    """The receipt of a payload that is not a transaction: rejected, ``wire_error``.

    Its ``base_version`` is the current version: the payload's own could not be read.
    """
    return Receipt(
        status="rejected",
        version=version,
        base_version=version,
        tick=tick,
        errors=(OpError(op=None, code="wire_error", message=message),),
    )


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise RequestError(
            f"{what} must be a string, not {type(value).__name__}", code="bad_argument"
        )
    return value


def _count(value: object, what: str, low: int = 0, high: int = 1 << 62) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(
            f"{what} must be an integer, not {type(value).__name__}", code="bad_argument"
        )
    if not low <= value <= high:
        raise OutOfRange(f"{what} must be between {low} and {high}, not {value}")
    return value


class ContextActor:
    """Serves one context: group-committed submissions and serialized reads (R21, R44-R46).

    Construct with the store directory and the context name; the context is
    created if missing unless ``create=False`` (``window``, ``history_keep`` and
    the scope's tenant and project go into its meta at creation only; the scope
    itself is ``scope.json``, see :func:`~actors.guard.settle_scope`). A
    failure to open is kept and answered to every call, so a client sees the
    typed error (:class:`NotFound`, :class:`~protocol.errors.StoreLocked` …)
    instead of a dead actor. A locked store is retried for ``lock_wait``
    seconds first: after a kill, the old process may still hold the lock for a
    moment.

    Governance: *admission* is the :class:`~protocol.governance.AdmissionPolicy`
    that ``admit``, ``pending`` and the background task use (default
    :class:`~protocol.governance.DefaultPolicy`). With *governance_every*
    (seconds) a background task runs an unattended pass (admission, then the
    quarantine scan; *governance_unused_ticks* enables the ``unused`` rule) that
    often, on the store thread, from the first moment the actor has an event
    loop; off by default. The first pass of an actor looks at everything, later
    ones only at what changed since (:func:`~protocol.governance.plan_pass`
    with the last pass's cursor), and write only when they decided something.
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
    ) -> None:
        self._store_dir = store_dir
        self._name = name
        self._tenant = tenant or "default"
        self._project = project or "default"
        self._enforce = bool(enforce)
        self._key: bytes | None = None
        self._verified: dict[bytes, Capability] = {}
        self._denials = 0
        self._audit_queue: list[tuple[list[dict[str, Any]], asyncio.Future[None]]] = []
        self._audit_flusher: asyncio.Task[None] | None = None
        self._policy: AdmissionPolicy = admission if admission is not None else DefaultPolicy()
        self._every: float | None = None
        self._unused_ticks = governance_unused_ticks
        self._worker: asyncio.Task[None] | None = None
        self._cursor: PassCursor | None = None  # where the last good pass left off
        self._search: Any = None  # the IndexWorker of search, started on first use
        self._passes = 0
        self._pass_errors = 0
        self._closing = False
        self._max_batch = max(1, min(int(max_batch), 4096))
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="morphz-context")
        self._pending: list[tuple[ContextTx, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._batches = 0
        self._transactions = 0
        self._largest = 0
        self._wire_rejections = 0
        self._ctx: Context | None = None
        self._open_error: MorphzError | None = None
        self._compilers: dict[tuple[str, str], Any] = {}
        try:  # refused before a context is created with them in its meta
            for value, what in ((tenant, "tenant"), (project, "project")):
                if value is not None:
                    check_scope_name(value, what)
        except MorphzError as e:
            self._open_error = e
        deadline = time.monotonic() + lock_wait
        while self._open_error is None:
            try:
                # A context created here records its scope in its meta too (the embedded
                # API's audit entries and the frames' envelopes read it from there).
                self._ctx = open_context(
                    store_dir,
                    name,
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
        if self._ctx is not None:
            try:
                scope = settle_scope(store_dir, name, tenant, project, bool(enforce))
                self._tenant, self._project = scope["tenant"], scope["project"]
                self._enforce = scope["enforce"]
                if self._enforce:
                    self._grant_key()
            except (MorphzError, OSError, ValueError) as e:
                self._ctx.close()
                self._ctx = None
                self._open_error = (
                    e
                    if isinstance(e, MorphzError)
                    else RequestError(f"cannot settle the scope: {e}", code="scope_error")
                )
        try:
            if governance_every is not None:
                self._every = check_every(governance_every)
            check_scan(governance_unused_ticks, 3)
            if not isinstance(getattr(self._policy, "name", None), str) or not callable(
                getattr(self._policy, "review", None)
            ):
                raise RequestError(
                    "admission must be a policy with a name and a review method",
                    code="bad_argument",
                )
        except MorphzError as e:
            if self._ctx is not None:
                self._ctx.close()
                self._ctx = None
            self._open_error = self._open_error or e
        self._ensure_worker()  # under Ray the constructor runs on the actor's event loop

    # -- permissions ---------------------------------------------------------

    def _grant_key(self) -> bytes:
        if self._key is None:
            self._key = grant_key(self._store_dir)
        return self._key

    def _authorize(
        self, op: str, method: str, token: Any
    ) -> tuple[PermissionDenied, dict[str, Any]] | None:
        """None when the call may run; else the denial and its audit entry (to write
        before answering). Free when not enforcing."""
        if not self._enforce:
            return None
        try:
            cap = self._verified.get(token) if isinstance(token, bytes) else None
            if cap is None:
                cap = capabilities.verify(token, self._grant_key())
                if len(self._verified) >= MAX_VERIFIED:
                    self._verified.pop(next(iter(self._verified)))
                self._verified[token] = cap
            elif cap.expires is not None and time.time() >= cap.expires:
                raise PermissionDenied("capability expired")
            if not capabilities.allows(cap, self._tenant, self._name, op):
                raise PermissionDenied(
                    f"{cap.holder!r} holds no {op} grant on context {self._name!r}"
                    f" of tenant {self._tenant!r}"
                )
        except PermissionDenied as e:
            self._denials += 1
            return e, self._entry(method, op, _holder_of(token), allowed=False, why=e.message)
        except MorphzError as e:  # no usable key: deny, never allow
            self._denials += 1
            denied = PermissionDenied(f"cannot check capabilities: {e.message}")
            return denied, self._entry(method, op, None, allowed=False, why=denied.message)
        return None

    # -- the durable audit log ------------------------------------------------

    def _entry(
        self,
        method: str,
        op: str,
        holder: str | None,
        *,
        allowed: bool,
        why: str,
        outcome: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        return audit_entry(
            method,
            op,
            holder=holder,
            allowed=allowed,
            why=why,
            outcome=outcome,
            context=self._name,
            tenant=self._tenant,
            **extra,
        )

    def _template(self, method: str, capability: Any) -> dict[str, Any]:
        """The audit template of a governance call (its decisions fill the rest)."""
        return audit_template(
            method, holder=_holder_of(capability), context=self._name, tenant=self._tenant
        )

    def _write_audit(self, entries: list[dict[str, Any]]) -> None:
        """On the store thread: one durable write of *entries*."""
        record_audit(self._context().backend, entries)

    async def _audit_now(self, entries: list[dict[str, Any]]) -> None:
        """Append *entries* durably before returning; concurrent appends share one write."""
        self._context()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._audit_queue.append((entries, future))
        if self._audit_flusher is None or self._audit_flusher.done():
            self._audit_flusher = loop.create_task(self._flush_audit())
        await future

    async def _flush_audit(self) -> None:
        loop = asyncio.get_running_loop()
        while self._audit_queue:
            batch: list[tuple[list[dict[str, Any]], asyncio.Future[None]]] = []
            size = 0
            while self._audit_queue and (not batch or size < MAX_AUDIT_BATCH):
                batch.append(self._audit_queue.pop(0))
                size += len(batch[-1][0])
            entries = [e for es, _ in batch for e in es]
            error: BaseException | None = None
            try:
                await loop.run_in_executor(self._executor, self._write_audit, entries)
            except Exception as e:
                error = e
            for _, future in batch:
                if future.done():
                    continue
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

    async def _audit_quietly(self, entry: dict[str, Any]) -> None:
        """Audit *entry*; a store that cannot write is logged, never answered instead."""
        if self._ctx is None:
            return
        try:
            await self._audit_now([entry])
        except Exception:
            log.exception("cannot write the audit entry of %s", entry.get("method"))

    def _audit_blocking(self, entry: dict[str, Any]) -> None:
        """:meth:`_audit_quietly` for the synchronous methods (``close``)."""
        if self._ctx is None:
            return
        try:
            self._executor.submit(self._write_audit, [entry]).result()
        except Exception:
            log.exception("cannot write the audit entry of %s", entry.get("method"))

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
        return ctx.backend.read(
            lambda v: plan_pass(v, policy=policy, unused_ticks=unused, cursor=cursor)
        )

    def _pass(self, ctx: Context, plan: PassPlan) -> dict[str, Any]:
        return apply_pass(
            ctx.backend,
            plan,
            audit=audit_template(
                "governance_pass", holder=WORKER, context=self._name, tenant=self._tenant
            ),
        )

    async def _governance_pass(self) -> dict[str, Any] | None:
        """One unattended pass; a failure is logged, audited, survived.

        Decided on a read (on the store thread, where no write can interleave
        with it) from the last pass's cursor, so it looks only at what changed;
        then, only if there is something to write, a separate write job on the
        store thread re-checks each decision and applies it. Commits queued
        meanwhile go between the two jobs.
        """
        try:
            plan = await self._run(self._plan)
            if plan.writes:
                report = await self._run(self._pass, plan)
            else:  # nothing to write: no store access, no second job
                report = self._pass(self._context(), plan)
            self._cursor = report["cursor"]
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._pass_errors += 1
            log.exception("governance pass of context %r failed", self._name)
            why = f"{type(e).__name__}: {e}"
            await self._audit_quietly(
                self._entry(
                    "governance_pass", "admin", WORKER, allowed=False, why=why, outcome="error"
                )
            )
            return None
        self._passes += 1
        return report

    # -- plumbing -----------------------------------------------------------

    def _context(self) -> Context:
        if self._ctx is None:
            assert self._open_error is not None
            raise self._open_error
        return self._ctx

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run *fn(context, *args)* on the store thread."""
        ctx = self._context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, ctx, *args))

    async def _reply(self, fn: Callable[..., Any], *args: Any) -> bytes:
        try:
            return ok(await self._run(fn, *args))
        except MorphzError as e:
            return failed(e)

    # -- submissions ----------------------------------------------------------

    @guarded("commit")
    async def submit(self, payload: bytes) -> bytes:
        """Decide one transaction (msgpack wire form); answer ``pack(receipt.to_dict())``.

        Durable before it answers; concurrent submissions share one LMDB write.
        A payload that does not decode gets a ``wire_error`` rejection and
        changes nothing. A refused request (the store cannot be opened or
        written) answers ``pack({"error": …})`` instead of a receipt.
        """
        try:
            tx = tx_from_msgpack(payload)
        except WireError as e:
            self._wire_rejections += 1
            try:
                meta = await self._run(Context.meta)
            except MorphzError as err:
                return failed(err)
            receipt = wire_rejection(e.message, version=meta.version, tick=meta.tick)
            return pack(receipt.to_dict())
        if self._ctx is None:
            assert self._open_error is not None
            return failed(self._open_error)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((tx, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        result = await future
        if isinstance(result, MorphzError):
            return failed(result)
        return pack(result)

    async def _flush(self) -> None:
        # Runs while anything is pending; what arrives during a write forms the next batch.
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            txs = [tx for tx, _ in batch]
            try:
                results = await loop.run_in_executor(self._executor, self._commit_batch, txs)
            except Exception as e:  # the executor itself failed: answer every waiter
                results = [e] * len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # the caller went away; its transaction is decided anyway
                    continue
                if isinstance(result, BaseException) and not isinstance(result, MorphzError):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def _commit_batch(self, txs: list[ContextTx]) -> list[Any]:
        """On the store thread: one durable write for *txs*; receipt dicts or exceptions."""
        ctx = self._context()
        try:
            receipts = ctx.commit_many(txs)
        except Exception as e:
            if len(txs) == 1:
                return [e]
        else:
            self._count_batch(len(txs))
            return [r.to_dict() for r in receipts]
        # The group failed as a whole (nothing was written): decide each alone, so that
        # one transaction the store refuses cannot take the others down with it.
        out: list[Any] = []
        for tx in txs:
            try:
                out.append(ctx.commit_many([tx])[0].to_dict())
                self._count_batch(1)
            except Exception as e:
                out.append(e)
        return out

    def _count_batch(self, n: int) -> None:
        self._batches += 1
        self._transactions += n
        self._largest = max(self._largest, n)

    # -- other writes -------------------------------------------------------

    @guarded("commit")
    async def observe(
        self, kind: str, text: str, session: str = "main", event_id: str | None = None
    ) -> bytes:
        """Record an observation; answers ``{"ref", "id", "duplicate"}``.

        With an ``event_id`` (``ev:`` + 20 hex digits, chosen by the caller) the
        call is idempotent: a retry returns the event already recorded.
        """
        try:
            batch = self._check_observations([[kind, text, session, event_id]])
        except MorphzError as e:
            return failed(e)
        return await self._reply(lambda ctx: _observe_many(ctx, batch)[0])

    @guarded("commit")
    async def observe_many(self, items: list[Any]) -> bytes:
        """Record ``[kind, text, session, event_id|None]`` items in one durable write."""
        try:
            batch = self._check_observations(items)
        except MorphzError as e:
            return failed(e)
        return await self._reply(_observe_many, batch)

    @staticmethod
    def _check_observations(items: Any) -> list[tuple[str, str, str, str]]:
        if not isinstance(items, (list, tuple)):
            raise RequestError("observations must be a list", code="bad_argument")
        _count(len(items), "number of observations", 1, MAX_OBSERVE_BATCH)
        out = []
        for item in items:
            if not isinstance(item, (list, tuple)) or len(item) not in (3, 4):
                raise RequestError(
                    "an observation is [kind, text, session, event_id]", code="bad_argument"
                )
            kind = _text(item[0], "kind")
            text = _text(item[1], "text")
            session = _text(item[2], "session")
            eid = item[3] if len(item) == 4 else None
            if eid is None:
                eid = new_event_id()
            elif not isinstance(eid, str) or not is_event_id(eid):
                raise RequestError(
                    f"an event id is 'ev:' and 20 hex digits, not {eid!r}", code="bad_event_id"
                )
            out.append((kind, text, session, eid))
        return out

    @guarded("commit")
    async def claim(self) -> bytes:
        """Claim every waiting input as one batch (R20); answers the claim's dict form."""
        return await self._reply(lambda ctx: ctx.claim().to_dict())

    @guarded("commit")
    async def deliver(self, ref: str) -> bytes:
        """Mark the user request *ref* delivered (R19)."""
        try:
            _text(ref, "ref")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.deliver, ref)

    # -- reads --------------------------------------------------------------

    @guarded("read")
    async def frame(self, frame_id: str) -> bytes:
        """The frame *frame_id* as a dict; ``NotFound`` if unknown."""
        try:
            _text(frame_id, "frame id")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.frame, frame_id)

    @guarded("read")
    async def snapshot(self, frame_ids: list[str]) -> bytes:
        """One consistent read: ``{"version", "tick", "frames": {id: summary | None}}``.

        A summary is ``{"revision", "lifecycle", "protected"}``; None means absent.
        An agent bases its next transaction on ``version``.
        """
        try:
            if not isinstance(frame_ids, (list, tuple)):
                raise RequestError("frame ids must be a list", code="bad_argument")
            _count(len(frame_ids), "number of frames", 0, MAX_SNAPSHOT_FRAMES)
            ids = [_text(f, "frame id") for f in frame_ids]
        except MorphzError as e:
            return failed(e)
        return await self._reply(_snapshot, ids)

    @guarded("read")
    async def state(self) -> bytes:
        """Version, tick, every frame, event and relation, and the sessions."""
        return await self._reply(Context.state)

    @guarded("read")
    async def event(self, ref: str) -> bytes:
        """An event's metadata."""
        try:
            _text(ref, "ref")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.event, ref)

    @guarded("read")
    async def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> bytes:
        """A chunk of an event's original text (R28)."""
        try:
            _text(ref, "ref")
            _count(offset, "offset")
            if length is not None:
                _count(length, "length")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.read_event, ref, offset, length)

    @guarded("read")
    async def history(self, frame_id: str) -> bytes:
        """Every committed write of *frame_id* (R29)."""
        try:
            _text(frame_id, "frame id")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.history, frame_id)

    @guarded("read")
    async def version(self) -> bytes:
        """The current version."""
        return await self._reply(lambda ctx: ctx.version)

    @guarded("read")
    async def meta(self) -> bytes:
        """The context's counters: version, tick, window, next_seq, history_keep, created."""
        return await self._reply(lambda ctx: ctx.meta().to_record())

    @guarded("read")
    async def txlog(self, version: int) -> bytes:
        """The log record of the transaction committed at *version*."""
        try:
            _count(version, "version")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.txlog, version)

    @guarded("admin")
    async def export(self, after_version: int = 0, limit: int = MAX_EXPORT_PAGE) -> bytes:
        """One page of the context's history, for history checkers.

        Answers ``pack({"log": [txlog records after after_version, ascending],
        "version", "tick", "window", "history_keep", "more", "events", "frames",
        "relations"})``. ``events`` (event records, no content), ``frames``
        (frame records) and ``relations`` are filled on the last page only
        (``more`` false), from the same snapshot as its log. Refused requests
        answer ``pack({"error": …})``.
        """
        try:
            _count(after_version, "after_version")
            _count(limit, "limit", 1, MAX_EXPORT_PAGE)
            page = await self._run(_export, after_version, limit)
            return pack(page)
        except MorphzError as e:
            return failed(e)

    # -- the agent loop: compiled inputs, traces, recall ------------------------

    @guarded("read")
    async def compile_input(
        self,
        session: str,
        config: dict[str, Any] | None = None,
        previous: dict[str, Any] | None = None,
        overflow: bool = False,
    ) -> bytes:
        """The model input for *session* (R35-R37): ``CompiledInput`` as a plain dict.

        *config* is a :class:`~protocol.compiler.CompilerConfig` dict, *previous*
        the input compiled for the call before (hysteresis, ContextDelta). One
        compiler per session and configuration is kept here, so its render
        cache serves every agent thread of that session.
        """
        try:
            _text(session, "session")
            cfg, prev = _compile_args(config, previous)
        except MorphzError as e:
            return failed(e)
        key = (session, cfg.model_dump_json())
        compiler = self._compilers.get(key)
        if compiler is None:
            from protocol.compiler import Compiler

            if len(self._compilers) >= MAX_COMPILERS:
                self._compilers.pop(next(iter(self._compilers)))
            compiler = self._compilers[key] = Compiler(cfg)

        def run(ctx: Context) -> dict[str, Any]:
            compiled = ctx.backend.read(
                lambda v: compiler.compile(
                    v, session=session, previous=prev, overflow=bool(overflow)
                )
            )
            return compiled.model_dump(mode="json")

        return await self._reply(run)

    @guarded("commit")
    async def record_trace(self, trace: dict[str, Any]) -> bytes:
        """Append a model-call trace (R39); see :meth:`service.context.Context.record_trace`."""
        if not isinstance(trace, dict):
            return failed(RequestError("a trace is a dict", code="bad_argument"))
        return await self._reply(Context.record_trace, trace)

    @guarded("read")
    async def traces(self, frame: str | None = None, after: int = 0, limit: int = 1000) -> bytes:
        """Model-call traces numbered above *after*; with *frame*, the calls it took part in."""
        try:
            if frame is not None:
                _text(frame, "frame id")
            _count(after, "after")
            _count(limit, "limit")
        except MorphzError as e:
            return failed(e)
        return await self._reply(lambda ctx: ctx.traces(frame=frame, after=after, limit=limit))

    @guarded("recall")
    async def recall_observation(
        self, request: dict[str, Any], session: str = "main", cursor: str | None = None
    ) -> bytes:
        """Recall one page and record it as a ``recall_result`` observation (R26, R30).

        Answers ``{"ref", "nodes", "edges", "recalled", "next_cursor"}``
        (``recalled``: the frame ids on the page).
        """
        try:
            _text(session, "session")
            if cursor is not None:
                _text(cursor, "cursor")
        except MorphzError as e:
            return failed(e)

        def run(ctx: Context) -> dict[str, Any]:
            page, e = ctx.recall_observation(request, cursor, session=session)
            return {
                "ref": e.ref,
                "nodes": len(page.nodes),
                "edges": len(page.edges),
                "recalled": list(e.extra.get("recalled") or ()),
                "next_cursor": page.next_cursor,
            }

        return await self._reply(run)

    @guarded("recall")
    async def search(self, args: dict[str, Any], session: str = "main") -> bytes:
        """A model's search (:func:`storage.search.index.model_search`) as a ``recall_result``.

        The context's lexical index is opened at the first search, with an
        index worker thread in this process keeping it current from the outbox;
        each search waits (up to :data:`SEARCH_CATCH_UP` seconds) for what was
        committed before it. Answers ``{"ref", "hits", "recalled", "lag"}``.
        """
        try:
            _text(session, "session")
            worker = self._index_worker()
        except MorphzError as e:
            return failed(e)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, worker.wait_for, None, SEARCH_CATCH_UP)

        def run(ctx: Context) -> dict[str, Any]:
            from storage.search.index import model_search, search_text

            result = model_search(worker.index, args)
            frames = [h.id for h in result.hits if h.type == "frame"]
            e = ctx.observe_retrieval(search_text(result), frames, session=session)
            return {"ref": e.ref, "hits": len(result.hits), "recalled": frames, "lag": result.lag}

        return await self._reply(run)

    def _index_worker(self) -> Any:
        """The index worker of this context, started on first use."""
        if self._search is None:
            from storage.search.index import IndexWorker, LexicalIndex

            index = LexicalIndex.for_backend(self._context().backend)
            self._search = IndexWorker(index)
        return self._search

    # -- governance: audit, admission, review, quarantine -------------------------

    @guarded("admin")
    async def audit(self, after: int = 0, limit: int = MAX_AUDIT_PAGE) -> bytes:
        """Durable audit entries numbered above *after*, at most *limit* (1 to 1000).

        Denials, exports, imports and governance decisions (of callers and of the
        background task), oldest first, each with its ``seq``; see
        :func:`protocol.governance.read_audit`. Survives restarts.
        """
        return await self._reply(lambda ctx: ctx.audit(after, limit))

    @guarded("admin")
    async def admit(self, frame_id: str | None = None, capability: Any = None) -> bytes:
        """Run the admission policy over the candidates (or *frame_id*); audited.

        Answers ``{"decisions": [...], "version": V or None}``; holds change
        nothing. NotFound / ``not_candidate`` for a bad *frame_id*.
        """
        audit = self._template("admit", capability)

        def run(ctx: Context) -> dict[str, Any]:
            ds, version = run_admission(
                ctx.backend, policy=self._policy, frame_id=frame_id, audit=audit
            )
            return {"decisions": [d.to_dict() for d in ds], "version": version}

        return await self._reply(run)

    @guarded("admin")
    async def review(
        self,
        frame_id: str,
        decision: str,
        reviewer: str,
        reason: str | None = None,
        capability: Any = None,
    ) -> bytes:
        """A human decision (``accept`` | ``reject``) on a candidate or quarantined frame.

        Answers ``{"decision", "version"}``; audited in the same write. Typed
        errors change nothing: ``bad_decision``, ``bad_reviewer``, NotFound,
        ``not_reviewable``.
        """
        audit = self._template("review", capability)

        def run(ctx: Context) -> dict[str, Any]:
            d, version = run_review(
                ctx.backend, frame_id, decision, reviewer, reason=reason, audit=audit
            )
            return {"decision": d.to_dict(), "version": version}

        return await self._reply(run)

    @guarded("admin")
    async def pending(self) -> bytes:
        """What awaits a human or admission, read-only: ``{"version", "items"}``.

        See :func:`protocol.governance.pending` (a dry run of this actor's policy).
        """
        return await self._reply(lambda ctx: ctx.pending(self._policy))

    @guarded("admin")
    async def quarantine_scan(
        self, unused_ticks: int | None = None, failed_uses: int = 3, capability: Any = None
    ) -> bytes:
        """Find low-quality frames and quarantine them in one audited write (R43).

        Answers ``{"findings", "quarantined", "spared", "version"}``; frames a
        human accepted are spared.
        """
        audit = self._template("quarantine_scan", capability)

        def run(ctx: Context) -> dict[str, Any]:
            return run_quarantine_scan(
                ctx.backend, unused_ticks=unused_ticks, failed_uses=failed_uses, audit=audit
            ).to_dict()

        return await self._reply(run)

    # -- governance: explicit export and import --------------------------------

    @guarded("read")
    async def export_frame(self, frame_id: str, capability: Any = None) -> bytes:
        """A sealed package of one frame, its sources' summaries and provenance; audited."""
        try:
            _text(frame_id, "frame id")
            key = self._grant_key()
        except MorphzError as e:
            return failed(e)

        def run(ctx: Context) -> dict[str, Any]:
            f = ctx.frame(frame_id)
            sources = []
            for ref in f["sources"]:
                try:
                    if ref.startswith("@e") or ref.startswith("ev:"):
                        summary = str(ctx.event(ref)["preview"])
                    else:
                        summary = str(ctx.frame(ref)["body"])
                except MorphzError:
                    summary = ""
                sources.append({"ref": ref, "summary": summary[:240]})
            return {
                "tenant": self._tenant,
                "project": self._project,
                "context": self._name,
                "version": ctx.version,
                "frame": f["id"],
                "revision": f["revision"],
                "body_forms": f["body_forms"],
                "sources": sources,
                "exported_at": time.time(),
            }

        try:
            doc = await self._run(run)
            # No package leaves without its durable audit entry.
            await self._audit_now(
                [
                    self._entry(
                        "export_frame",
                        "read",
                        _holder_of(capability),
                        allowed=True,
                        why=f"exported {frame_id} at version {doc['version']}",
                    )
                ]
            )
        except MorphzError as e:
            return failed(e)
        return ok(capabilities.seal(doc, key))

    @guarded("admin")
    async def import_frame(
        self, package: bytes, as_id: str | None = None, capability: Any = None
    ) -> bytes:
        """Derive a frame from an exported package, with a provenance envelope; audited.

        Answers ``{"id", "receipt"}``. The package must carry a valid seal.
        """
        try:
            key = self._grant_key()
            doc = capabilities.unseal(package, key)
            if not isinstance(doc, dict):
                raise PermissionDenied("malformed package")
            new_id = as_id if as_id is not None else f"imported/{doc['context']}/{doc['frame']}"
            _text(new_id, "frame id")
            provenance = (
                Symbol("provenance"),
                (Symbol("from-tenant"), str(doc["tenant"])),
                (Symbol("from-project"), str(doc["project"])),
                (Symbol("from-context"), str(doc["context"])),
                (Symbol("version"), int(doc["version"])),
                (Symbol("frame"), str(doc["frame"])),
                (Symbol("revision"), int(doc["revision"])),
                (Symbol("sources"), *((str(s["ref"]), str(s["summary"])) for s in doc["sources"])),
            )
            body = (provenance, *(from_plain(x) for x in doc["body_forms"]))
            digest = hashlib.sha256(bytes(package) + new_id.encode()).hexdigest()[:32]
        except (MorphzError, KeyError, TypeError, ValueError) as e:
            err = e if isinstance(e, MorphzError) else PermissionDenied(f"malformed package: {e}")
            await self._audit_quietly(
                self._entry(
                    "import_frame",
                    "admin",
                    _holder_of(capability),
                    allowed=False,
                    why=str(err),
                    outcome="refused",
                )
            )
            return failed(err)

        def run(ctx: Context) -> dict[str, Any]:
            cid = f"import-{digest}"
            known = ctx.backend.read(lambda v: v.client(cid))
            if known is not None:  # imported before (its base version differed): the same answer
                original = dict(ctx.txlog(known[0])["receipt"])
                return {**original, "duplicate": True}
            tx = ContextTx(
                base_version=ctx.version,
                reason="import",
                client_id=cid,
                ops=(Derive(id=new_id, body=body),),
            )
            return ctx.commit(tx).to_dict()

        try:
            receipt = await self._run(run)
        except MorphzError as e:
            return failed(e)
        except ValueError as e:  # pydantic: a bad frame id or body
            return failed(RequestError(f"cannot import: {e}", code="bad_argument"))
        committed = receipt.get("status") == "committed"
        try:
            # Durable before the answer; a retry after a failure here is a duplicate import.
            await self._audit_now(
                [
                    self._entry(
                        "import_frame",
                        "admin",
                        _holder_of(capability),
                        allowed=committed,
                        outcome=None if committed else "refused",
                        why=(
                            f"imported {doc['context']}/{doc['frame']}@{doc['version']}"
                            f" as {new_id}: {receipt.get('status')}"
                        ),
                        version=receipt.get("version"),
                    )
                ]
            )
        except MorphzError as e:
            return failed(e)
        return ok({"id": new_id, "receipt": receipt})

    # -- introspection (plain values, no store access) ------------------------

    @guarded("admin", raises=True)
    async def stats(self) -> dict[str, int]:
        """Group-commit counters since this process started.

        ``batches`` counts LMDB writes that committed submissions,
        ``transactions`` the submissions they decided, ``largest_batch`` the
        biggest group, ``pending`` what waits now, ``wire_rejections`` the
        payloads that did not decode.
        """
        return {
            "batches": self._batches,
            "transactions": self._transactions,
            "largest_batch": self._largest,
            "pending": len(self._pending),
            "wire_rejections": self._wire_rejections,
            "governance_passes": self._passes,
            "governance_errors": self._pass_errors,
        }

    @guarded("admin", raises=True)
    async def describe(self) -> dict[str, Any]:
        """Who serves the context: name, store directory, node, process, open error."""
        return {
            "name": self._name,
            "store_dir": self._store_dir,
            "node_id": self.node_id(),
            "pid": os.getpid(),
            "open_error": None if self._open_error is None else error_doc(self._open_error),
            "tenant": self._tenant,
            "project": self._project,
            "enforce": self._enforce,
            "denials": self._denials,
            "governance_every": self._every,
            "admission": self._policy.name,
        }

    async def handshake(self, capability: Any = None) -> dict[str, Any]:
        """What :func:`~actors.client.connect` checks, open to every caller (no content).

        Name, store directory, node, open error, tenant, project, enforcement.
        """
        self._ensure_worker()
        return {
            "name": self._name,
            "store_dir": self._store_dir,
            "node_id": self.node_id(),
            "open_error": None if self._open_error is None else error_doc(self._open_error),
            "tenant": self._tenant,
            "project": self._project,
            "enforce": self._enforce,
        }

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

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
        """
        self._closing = True
        if self._worker is not None and not self._worker.done():
            try:
                self._worker.cancel()
            except RuntimeError:  # its event loop is gone (plain-class tests)
                pass
        self._executor.shutdown(wait=True)
        if self._search is not None:
            self._search.stop()
            self._search.index.close()
            self._search = None
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
            self._open_error = NotFound(f"context {self._name!r} is closed")


def _holder_of(token: Any) -> str | None:
    """The holder a token claims (unverified: for the audit log only)."""
    try:
        return capabilities.decode(token).holder
    except MorphzError:
        return None


def _compile_args(config: Any, previous: Any) -> tuple[Any, Any]:
    """The validated compiler configuration and previous input of ``compile_input``."""
    from pydantic import ValidationError

    from protocol.compiler import CompilerConfig
    from protocol.turns import CompiledInput

    try:
        cfg = CompilerConfig.model_validate(config or {})
        prev = None if previous is None else CompiledInput.model_validate(previous)
    except ValidationError as e:
        raise RequestError(f"bad compile request: {e.errors()[0].get('msg')}") from e
    return cfg, prev


def _observe_many(ctx: Context, batch: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    now = time.time()

    def run(w: WriteView) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for kind, text, session, eid in batch:
            seq = w.event_seq(eid)
            if seq is not None:
                known = w.event(seq)
                assert known is not None
                if known.kind != kind or known.size != len(text) or known.session != session:
                    raise RequestError(
                        f"event id {eid} names a different observation", code="event_id_reused"
                    )
                out.append({"ref": known.ref, "id": known.id, "duplicate": True})
                continue
            e, cs = observe(w, kind=kind, text=text, session=session, now=now, event_id=eid)
            w.apply(cs)
            out.append({"ref": e.ref, "id": e.id, "duplicate": False})
        return out

    return ctx.backend.transact(run)


def _snapshot(ctx: Context, ids: list[str]) -> dict[str, Any]:
    def run(v: ReadView) -> dict[str, Any]:
        meta = v.meta()
        frames: dict[str, Any] = {}
        for fid in ids:
            f = v.frame(fid)
            frames[fid] = (
                None
                if f is None
                else {"revision": f.revision, "lifecycle": f.lifecycle, "protected": f.protected}
            )
        return {"version": meta.version, "tick": meta.tick, "frames": frames}

    return ctx.backend.read(run)


def _export(ctx: Context, after: int, limit: int) -> dict[str, Any]:
    def run(v: ReadView) -> dict[str, Any]:
        meta = v.meta()
        last = min(meta.version, after + limit)
        log = []
        for version in range(after + 1, last + 1):
            rec = v.txlog(version)
            if rec is not None:
                log.append(rec)
        more = last < meta.version
        page: dict[str, Any] = {
            "log": log,
            "version": meta.version,
            "tick": meta.tick,
            "window": meta.window,
            "history_keep": meta.history_keep,
            "tenant": meta.tenant,
            "project": meta.project,
            "more": more,
            "events": [],
            "frames": [],
            "relations": [],
        }
        if not more:
            page["events"] = [e.to_record() for e in v.iter_events()]
            page["frames"] = [f.to_record() for f in v.iter_frames()]
            page["relations"] = [list(r) for r in v.iter_relations()]
        return page

    return ctx.backend.read(run)
