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
:meth:`protocol.context.Context.commit_many`. A submission is answered only
after that write returned: an acknowledged commit is durable (R44).

Payloads: ``submit`` takes the msgpack wire form of one transaction
(:func:`protocol.wire.tx_to_msgpack`, client id inside the transaction) and
answers ``pack(receipt.to_dict())``. A payload that does not decode gets a
rejected receipt with the error code ``wire_error`` and writes nothing (R45).
Other store methods answer with the envelope of :mod:`actors.replies`.

Ray is not imported here except by :meth:`ContextActor.node_id`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from actors.replies import error_doc, failed, ok
from protocol.context import Context, new_event_id
from protocol.engine import observe
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    RequestError,
    StoreLocked,
    WireError,
)
from protocol.ids import is_event_id
from protocol.receipts import OpError, Receipt
from protocol.tx import ContextTx
from protocol.view import ReadView, WriteView
from protocol.wire import pack, tx_from_msgpack
from storage import open_context

T = TypeVar("T")

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
    created if missing unless ``create=False`` (``window`` and ``history_keep``
    apply at creation only). A failure to open is kept and answered to every
    call, so a client sees the typed error (:class:`NotFound`,
    :class:`~protocol.errors.StoreLocked` …) instead of a dead actor. A locked
    store is retried for ``lock_wait`` seconds first: after a kill, the old
    process may still hold the lock for a moment.
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
    ) -> None:
        self._store_dir = store_dir
        self._name = name
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
        deadline = time.monotonic() + lock_wait
        while True:
            try:
                self._ctx = open_context(
                    store_dir, name, window=window, history_keep=history_keep, create=create
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

    async def claim(self) -> bytes:
        """Claim every waiting input as one batch (R20); answers the claim's dict form."""
        return await self._reply(lambda ctx: ctx.claim().to_dict())

    async def deliver(self, ref: str) -> bytes:
        """Mark the user request *ref* delivered (R19)."""
        try:
            _text(ref, "ref")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.deliver, ref)

    # -- reads --------------------------------------------------------------

    async def frame(self, frame_id: str) -> bytes:
        """The frame *frame_id* as a dict; ``NotFound`` if unknown."""
        try:
            _text(frame_id, "frame id")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.frame, frame_id)

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

    async def state(self) -> bytes:
        """Version, tick, every frame, event and relation, and the sessions."""
        return await self._reply(Context.state)

    async def event(self, ref: str) -> bytes:
        """An event's metadata."""
        try:
            _text(ref, "ref")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.event, ref)

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

    async def history(self, frame_id: str) -> bytes:
        """Every committed write of *frame_id* (R29)."""
        try:
            _text(frame_id, "frame id")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.history, frame_id)

    async def version(self) -> bytes:
        """The current version."""
        return await self._reply(lambda ctx: ctx.version)

    async def meta(self) -> bytes:
        """The context's counters: version, tick, window, next_seq, history_keep, created."""
        return await self._reply(lambda ctx: ctx.meta().to_record())

    async def txlog(self, version: int) -> bytes:
        """The log record of the transaction committed at *version*."""
        try:
            _count(version, "version")
        except MorphzError as e:
            return failed(e)
        return await self._reply(Context.txlog, version)

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

    async def record_trace(self, trace: dict[str, Any]) -> bytes:
        """Append a model-call trace (R39); see :meth:`protocol.context.Context.record_trace`."""
        if not isinstance(trace, dict):
            return failed(RequestError("a trace is a dict", code="bad_argument"))
        return await self._reply(Context.record_trace, trace)

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

    async def recall_observation(self, request: dict[str, Any], session: str = "main") -> bytes:
        """Recall one page and record it as a ``recall_result`` observation (R26, R30).

        Answers ``{"ref", "nodes", "edges"}``.
        """
        try:
            _text(session, "session")
        except MorphzError as e:
            return failed(e)

        def run(ctx: Context) -> dict[str, Any]:
            page, e = ctx.recall_observation(request, session=session)
            return {"ref": e.ref, "nodes": len(page.nodes), "edges": len(page.edges)}

        return await self._reply(run)

    # -- introspection (plain values, no store access) ------------------------

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
        }

    async def describe(self) -> dict[str, Any]:
        """Who serves the context: name, store directory, node, process, open error."""
        return {
            "name": self._name,
            "store_dir": self._store_dir,
            "node_id": self.node_id(),
            "pid": os.getpid(),
            "open_error": None if self._open_error is None else error_doc(self._open_error),
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

    def close(self) -> None:
        """Close the store (the actor is unusable afterwards); for tests and shutdown."""
        self._executor.shutdown(wait=True)
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
            self._open_error = NotFound(f"context {self._name!r} is closed")


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
