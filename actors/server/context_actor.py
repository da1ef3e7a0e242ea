"""The context actor: one cognitive context served to a cluster, commits group-committed.

:class:`ContextActor` is a plain class; :mod:`actors.client.handle` runs it as an async
Ray actor (``ray.remote(ContextActor)``). It owns the context's LMDB store
exclusively (the store's writer lock), keeps no state that the store does not
hold, and so restarts by reopening the store: nothing is replayed.

It is a port: every capability is a method of the application service
(:class:`service.context.Context` and :mod:`service.governance`); this class
adds only what serving it to many callers needs: checking arguments, the
capability guard (:class:`~actors.server.guard.Guard`), the group-commit inbox and the
audit buffer (:mod:`actors.server.inbox`), running service calls off the event loop,
the background governance task, and translating errors into reply envelopes.

Concurrency: the event loop accepts calls; every store access runs on one
dedicated thread (a ``ThreadPoolExecutor(1)``), so accesses are serialized and
the loop keeps accepting submissions while a write is being fsynced.
Submissions queue up in the inbox, and one flusher task commits everything
queued (at most :data:`~actors.server.inbox.MAX_BATCH`) in a single durable write. A
submission is answered only after that write returned: an acknowledged commit
is durable (R44).

Payloads: ``submit`` takes the msgpack wire form of one transaction
(:func:`protocol.txwire.tx_to_msgpack`, client id inside the transaction) and
answers ``pack(receipt.to_dict())``. A payload that does not decode gets a
rejected receipt with the error code ``wire_error`` and writes nothing (R45).
Other store methods answer with the envelope of :mod:`actors.client.replies`.

Governance (docs/governance.md, docs/permissions.md): denials, exports,
imports and governance decisions are appended to the store's durable audit
table before the call is answered; ``admit``, ``review``, ``pending`` and
``quarantine_scan`` run on the store thread like every write; with
``governance_every`` a background task runs admission and the quarantine scan
unattended.

The hosting (opening, the store thread, the guard, the inbox, the audit buffer,
the background governance task, introspection, close) is :class:`~actors.server.host.ContextHost`'s.
Ray is not imported here. Every registered operation (:mod:`service.operations`) is a
method made by :func:`serve` from its declaration, given this actor's grant key, scope
and admission policy through its :class:`~service.registry.Caller`; written here by hand
are only the methods serving the operations declared with ``carry=``: submissions, wire
bytes into the group-commit inbox.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

from actors.client.replies import failed, ok
from actors.server.guard import guarded, holder_of
from actors.server.host import ContextHost
from protocol.errors import MorphzError, Overloaded, RequestError, WireError
from protocol.receipts import OpError, Receipt, without_reads
from protocol.txwire import SubmittedTx
from protocol.wire import encode, pack
from service.context import Context
from service.operations import operations
from service.registry import Caller, Operation
from service.transactions import MAX_SUBMIT_MANY


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


class ContextActor(ContextHost):
    """Serves one context: group-committed submissions and serialized reads (R21, R44-R46).

    Construct with the store directory and the context name; the context is
    created if missing unless ``create=False`` (``window``, ``history_keep`` and
    the scope's tenant and project go into its meta at creation only; the scope
    itself is ``scope.json``, see :func:`~actors.server.guard.settle_scope`). A
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

    # -- submissions ----------------------------------------------------------

    @guarded("commit")
    async def submit(self, payload: bytes, capability: Any = None) -> bytes:
        """Decide one transaction (msgpack wire form); answer ``pack(receipt.to_dict())``.

        Durable before it answers; concurrent submissions share one LMDB write.
        A payload that does not decode gets a ``wire_error`` rejection and
        changes nothing. A refused request (the store cannot be opened or
        written) answers ``pack({"error": …})`` instead of a receipt. A rejection's
        receipt carries the conflicting frames' bodies (``current``) and the ids
        changed since the base only for a caller holding ``read``. A payload over a
        byte budget (:mod:`actors.server.intake`) answers ``failed(Overloaded)``.
        """
        reply: bytes = await self._budgeted([payload], capability, single=True)
        return reply

    @guarded("commit")
    async def submit_many(self, payloads: list[bytes], capability: Any = None) -> Any:
        """Decide several transactions sent in one call: the list of what :meth:`submit`
        would answer for each, in order.

        They join the inbox together, so they are decided in order, in the same
        group commit when they fit, each on its own: one rejected changes nothing
        for the others. A writer pipelines its submissions this way for one call's
        cost. Not a list of at most :data:`MAX_SUBMIT_MANY` byte strings:
        ``failed(RequestError)`` (bytes, not a list), nothing decided.
        """
        if (
            not isinstance(payloads, (list, tuple))
            or not 1 <= len(payloads) <= MAX_SUBMIT_MANY
            or not all(isinstance(p, bytes) for p in payloads)
        ):
            return failed(
                RequestError(
                    f"submit_many takes a list of 1 to {MAX_SUBMIT_MANY} payloads (bytes)",
                    code="bad_argument",
                )
            )
        return await self._budgeted(payloads, capability, single=False)

    async def _budgeted(self, payloads: list[bytes], capability: Any, *, single: bool) -> Any:
        """Decide *payloads* within the caller's byte budgets; Overloaded refuses them all."""
        caller = self.intake.caller(capability)
        size = sum(len(p) for p in payloads if isinstance(p, bytes))
        try:
            self.intake.reserve(caller, size)
        except Overloaded as e:
            return failed(e)
        try:
            reads, agent = self.guard.permits("read", capability), self._agent(capability)
            if single:
                return await self._submit(payloads[0], reads, agent)
            return list(await asyncio.gather(*(self._submit(p, reads, agent) for p in payloads)))
        finally:
            self.intake.release(caller, size)

    async def _joined(self, op: Operation[Any, Any], bound: Any) -> bytes:
        """Serve a write declared with a ``step`` (observe, claim, deliver …) in the
        inbox's next group write, beside the transactions and other calls arriving with
        it: answered once that write is durable, with its own reply or typed error."""
        try:
            self._context()
        except MorphzError as e:
            return failed(e)
        result = await self._inbox.write(functools.partial(op.run_in, args=bound))
        if isinstance(result, MorphzError):
            return failed(result)
        return ok(result)

    def _agent(self, capability: Any) -> str | None:
        """Who submits, for the log and the audit: the holder of the capability the guard
        verified; None when the context does not enforce (a claim nobody checked)."""
        return holder_of(capability) if self.guard.enforce else None

    async def _submit(self, payload: bytes, reads: bool, agent: str | None) -> bytes:
        try:
            # The client's text is not trusted: it may say other than the operations it
            # carries. The log records the operations applied (read back printed from them).
            tx = SubmittedTx((await self.intake.decode(payload)).tx, None, agent)
        except WireError as e:
            self.metrics.wire_rejected()
            try:
                meta = await self._run(Context.meta)
            except MorphzError as err:
                return failed(err)
            receipt = wire_rejection(e.message, version=meta.version, tick=meta.tick)
            return pack(receipt.to_dict())
        if self._ctx is None:
            assert self._open_error is not None
            return failed(self._open_error)
        result = await self._inbox.submit(tx)
        if isinstance(result, MorphzError):
            return failed(result)
        # A receipt's dict form is its model's JSON dump: plain by construction, so it is
        # encoded without walking it first (``pack``'s check, a few µs per commit).
        return encode(result if reads else without_reads(result))


def serve(op: Operation[Any, Any]) -> Any:
    """The context actor's method of a registered operation (:mod:`service.operations`).

    The capability guard of the operation's permission (a denial is audited,
    then answered), the one argument check (:meth:`~service.registry.Operation.bind`:
    a bad argument is answered as its typed error, nothing runs), the operation's
    ``prepare`` part off the store thread (a read that never holds it; with the index
    workers started for an ``indexed`` operation),
    the service function on the store thread with the caller (the capability's holder, this
    actor's admission policy), and the reply envelope (:mod:`actors.client.replies`).
    Its signature names the operation's arguments, so Ray binds calls by them.
    """

    async def method(
        self: ContextActor, *args: Any, capability: Any = None, **kwargs: Any
    ) -> bytes:
        try:
            bound = op.bind(*args, **kwargs)
        except MorphzError as e:
            return failed(e)
        caller = Caller(
            holder=holder_of(capability),
            policy=self._policy,
            key=self.guard.key,
            tenant=self._tenant,
            project=self._project,
        )
        read = not op.writes  # a replicated primary serves it under its read lease
        if op.step is not None and op.prepare is None:
            return await self._joined(op, bound)
        if op.prepare is None:
            return await self._reply(lambda ctx: op.run(ctx, bound, caller), read=read)
        try:  # the part that reads without the writer, off the store thread
            ctx = self._context()
            if op.indexed:
                self._keep_indexed(ctx)
            loop = asyncio.get_running_loop()
            prepared = await loop.run_in_executor(None, op.prepare, ctx, bound)
        except MorphzError as e:
            return failed(e)
        return await self._reply(lambda ctx: op.run(ctx, bound, caller, prepared), read=read)

    method.__name__ = method.__qualname__ = op.name
    method.__doc__ = op.__doc__
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", kind),
            *(p.replace(kind=kind, annotation=inspect.Parameter.empty) for p in op.parameters),
            inspect.Parameter("capability", inspect.Parameter.KEYWORD_ONLY, default=None),
        ]
    )
    return guarded(op.permission)(method)


for _op in operations():
    if _op.carry is None:  # a carried one (submit) is served by the method above
        setattr(ContextActor, _op.name, serve(_op))
