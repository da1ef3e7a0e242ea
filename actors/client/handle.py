"""The public handle of a context actor: :func:`connect`, :func:`lookup`, :class:`ContextHandle`.

Like ``ray.util.queue``: a small wrapper creates (or finds) the named actor,
validates arguments before any remote call, offers blocking and ``async``
forms, and translates Ray's errors into the library's own. The remote call
itself — timeout, retries, re-lookup after a restart, error translation — is
:mod:`actors.client.transport`'s; here each method is written once, as a *call spec*
(argument checks, actor method, reply decoder) from which
:class:`~actors.client.transport.Remote` makes the blocking method and its ``async``
form. Replies of a fixed shape are typed models (:mod:`protocol.replies`) that
also read like the dicts they used to be (docs/actors.md).

Idempotency (R25): :meth:`ContextHandle.submit` gives every transaction a
client id (a fresh ``c-<uuid4>`` unless one is given) and sends the same id on
every retry, so a retry after a lost reply or an actor restart returns the
original receipt (``duplicate=True``) instead of committing twice. Ray itself
may re-run a call after a restart (``max_task_retries=-1``); the client id
makes that safe too. Observations get a caller-chosen event id for the same
reason. ``claim`` is at-least-once: a repeated claim claims whatever waits at
that moment (often nothing, which does not advance the tick).

A transaction given as text is parsed here, once: the payload carries the
parsed form and the text (:func:`protocol.txwire.tx_to_msgpack`), so the actor
logs the text as an embedded commit would, without parsing it again.

Every registered operation (:mod:`service.operations`) is a method of the handle
through :class:`~service.operations.Operations` (and its ``*_async`` form); written
here are only the calls that travel differently (submissions as wire bytes, the
read-modify-write loop, sharing a frame, the actor's introspection).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Generator, Iterable
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

from actors.client.joining import check_text
from actors.client.names import DEFAULT_NAMESPACE, actor_name
from actors.client.replies import open_reply, raise_error
from actors.client.transport import Call, Remote, RetryPolicy, Transport
from actors.client.updates import UpdateFn, Updater, UpdateResult
from protocol import wire
from protocol.errors import MorphzError, RequestError, WireError
from protocol.receipts import Receipt
from protocol.tx import ContextTx
from protocol.txwire import submitted_from_msgpack
from protocol.wire import unpack
from service.operations import Operations, operations
from service.registry import Bound, Operation
from service.transactions import new_client_id, wire_payload

__all__ = [
    "DEFAULT_NAMESPACE",
    "ContextHandle",
    "RetryPolicy",
    "carried",
    "decode_receipt",
    "new_client_id",
]


T = TypeVar("T")

UPDATE_BACKOFF = RetryPolicy(attempts=8, initial=0.002, multiplier=2.0, max_delay=0.05)
"""How long :meth:`ContextHandle.update` waits before retry *n* after a conflict:
2 ms doubling to 50 ms, each scaled by a random factor in [0.5, 1]."""


def _retry_delay(policy: RetryPolicy, rejections: int) -> float:
    """How long to wait before the retry after the *rejections*-th rejection of one update.

    The first retry goes at once: the context actor answers a conflict on a frame
    when it is this writer's turn on it (actors/server/inbox.py), so waiting would only
    leave the frame idle. Later ones (another writer got in first) back off.
    """
    if rejections <= 1:
        return 0.0
    return policy.delay(min(rejections - 2, policy.attempts - 1)) or 0.0


# -- reply decoders -------------------------------------------------------------------


def _bare(raw: Any) -> Any:
    """The value of an unenveloped answer (a packed receipt); the typed error of an
    error map (a request refused as a whole)."""
    doc = unpack(raw)
    if isinstance(doc, dict) and "error" in doc and "status" not in doc:
        raise_error(doc["error"])
    return doc


@cache
def carried(op: Operation[Any, T]) -> Callable[[Any], T]:
    """The decoder of an operation the actor serves in its own method (``carry=``): the
    packed reply as it is, or a list of them, each item packed on its own.

    A receipt (or a list of them: ``submit``, ``submit_many``, ``check``) is validated
    at once by its declared type; only a reply that fails that validation takes the
    general way (the payload type check, an error map's typed error, then the
    validation again), so every reply decodes and fails as it would that way: a reply
    that is a valid receipt passes the payload type check too (docs/actors.md)."""
    receipts = op.reply in (Receipt, list[Receipt])

    def decode(raw: Any) -> T:
        if receipts:
            try:
                docs = [wire.decode(i) for i in raw] if isinstance(raw, list) else wire.decode(raw)
                return op.decode(docs)
            except WireError:
                pass  # not a valid receipt: the general way says why
        value = [_bare(item) for item in raw] if isinstance(raw, list) else _bare(raw)
        return op.decode(value)

    return decode


def decode_receipt(raw: Any) -> Receipt:
    """The receipt a ``submit`` answer of the context actor holds (raw bytes); the typed
    error of a request refused as a whole."""
    receipt: Receipt = carried(Operations.submit)(raw)
    return receipt


@cache
def _decoder(op: Operation[Any, T]) -> Callable[[Any], T]:
    """The decoder of an enveloped reply of a registered operation (one per operation)."""
    return lambda raw: op.decode(open_reply(raw))


def _plain(kind: type) -> Any:
    """A decoder of a raw (unenveloped) answer, converted to *kind*."""
    return lambda raw: kind(raw)


def _listed(txs: Iterable[ContextTx | str]) -> Any:
    """*txs* as the list ``submit_many`` takes; one transaction (or bytes) stays itself, so
    the argument check refuses it (a string is iterable too)."""
    if isinstance(txs, (str, bytes, ContextTx)):
        return txs
    return list(txs) if isinstance(txs, Iterable) else txs


class ContextHandle(Operations):
    """A picklable handle of one context actor; pass it to other actors freely.

    Every method is blocking; the ``*_async`` forms are for event loops (agent
    threads). Errors are the library's own: a refused request raises the same
    class it would raise embedded (``NotFound`` for an unknown frame …), a
    rejected transaction is a receipt, and an unreachable actor raises
    :class:`~protocol.errors.TransportError` (a ``StoreError``, code
    ``actor_unavailable``) after the retry policy.
    """

    def __init__(
        self,
        actor: Any,
        name: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        capability: bytes | None = None,
        ray_name: str | None = None,
    ) -> None:
        # ray_name: the actor's Ray name when it is not ``ctx:<name>`` (a promoted primary)
        self.transport = Transport(
            actor,
            ray_name or actor_name(name),
            label=name,
            namespace=namespace,
            retry=retry,
            timeout=timeout,
            capability=capability,
        )
        self.name = name
        self.namespace = namespace

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy of calls that could not reach the actor."""
        return self.transport.retry

    @property
    def timeout(self) -> float | None:
        """Seconds each attempt of a call may take (None: no limit)."""
        return self.transport.timeout

    @property
    def capability(self) -> bytes | None:
        """The capability token every guarded call carries, if any."""
        return self.transport.capability

    def with_capability(self, capability: bytes | None) -> ContextHandle:
        """The same actor, calls carrying *capability* (token bytes, see protocol.capabilities)."""
        other = ContextHandle.__new__(ContextHandle)
        other.transport = self.transport.with_capability(capability)
        other.name, other.namespace = self.name, self.namespace
        return other

    def __repr__(self) -> str:
        return f"ContextHandle({self.name!r}, namespace={self.namespace!r})"

    @property
    def actor(self) -> Any:
        """The underlying Ray actor handle (its methods answer msgpack; see the docs)."""
        return self.transport.actor

    def _call(
        self, op: Operation[Any, T], args: BaseModel, timeout: float | None = None
    ) -> Call[T]:
        if op.carry is not None:
            return Call(op.name, op.carry.encode(args), carried(op), timeout=timeout)
        if op.keyed is not None:
            args = op.keyed(args)
        return Call(op.name, op.wire(args), _decoder(op), timeout=timeout)

    def invoke(self, op: Operation[Any, T], args: BaseModel) -> T:
        """Send a registered operation (:mod:`service.operations`) with its checked *args*
        to the context actor; its reply, of the type the embedded call answers. The
        idempotency key of a write (an event id) is drawn here, once, so every retry
        carries the same one."""
        return self.transport.call(self._call(op, args))

    async def invoke_async(self, op: Operation[Any, T], args: BaseModel) -> T:
        """:meth:`invoke` for event loops."""
        return await self.transport.call_async(self._call(op, args))

    # -- transactions ---------------------------------------------------------

    @staticmethod
    def prepare(tx: ContextTx | str, client_id: str | None = None) -> tuple[ContextTx, bytes]:
        """The transaction with its client id settled, and its wire payload.

        Text is parsed here, once (a :class:`~protocol.errors.ParseError` never
        reaches the actor), and the payload carries the text beside the parsed
        form. The client id is *client_id*, else the one inside *tx*, else a
        fresh one.
        """
        payload = ContextHandle.payload(tx, client_id)
        return submitted_from_msgpack(payload).tx, payload

    @staticmethod
    def payload(tx: ContextTx | str, client_id: str | None = None) -> bytes:
        """The wire payload alone of :meth:`prepare` (a server port forwarding a request
        needs no parsed transaction back)."""
        (payload,) = wire_payload(Operations.submit.bind(tx, client_id))
        return payload

    # ``submit`` and ``submit_many`` are registered operations (their argument check,
    # wire bytes and reply decoding are the declaration's); these forms add the
    # handle's own per-call *timeout*.

    def submit(  # type: ignore[override]
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        """Submit one transaction and wait for its durable receipt (committed or rejected).

        Retries (lost replies, a restarting actor, *timeout* per attempt) reuse
        the client id, so the transaction is applied at most once.
        """
        op = Operations.submit
        return self.transport.call(self._call(op, op.bind(tx, client_id), timeout))

    async def submit_async(
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        """:meth:`submit` for event loops."""
        op = Operations.submit
        return await self.transport.call_async(self._call(op, op.bind(tx, client_id), timeout))

    def submit_many(  # type: ignore[override]
        self, txs: Iterable[ContextTx | str], *, timeout: float | None = None
    ) -> list[Receipt]:
        """Submit several transactions in one call; their durable receipts, in order.

        Each is decided on its own, in order (a rejected one changes nothing for
        the others), and each has its own client id, so a retried call applies
        none twice. A writer pipelines its submissions this way.
        """
        op = Operations.submit_many
        return self.transport.call(self._call(op, op.bind(_listed(txs)), timeout))

    async def submit_many_async(
        self, txs: Iterable[ContextTx | str], *, timeout: float | None = None
    ) -> list[Receipt]:
        """:meth:`submit_many` for event loops."""
        op = Operations.submit_many
        return await self.transport.call_async(self._call(op, op.bind(_listed(txs)), timeout))

    @Remote
    def submit_payload(self, payload: bytes, *, timeout: float | None = None) -> Call[Receipt]:
        """Send raw wire bytes as they are (for tests of hostile input and for other clients)."""
        return Call("submit", (payload,), carried(Operations.submit), timeout=timeout)

    submit_payload_async = submit_payload.aio

    # -- other writes -----------------------------------------------------------

    # -- reads ------------------------------------------------------------------

    def _updater(
        self,
        frame_id: str,
        fn: UpdateFn,
        reason: str,
        max_attempts: int,
        known: dict[str, Any] | None,
        backoff: RetryPolicy | None,
    ) -> tuple[Updater, RetryPolicy]:
        check_text(frame_id, "frame id")
        if backoff is not None and not isinstance(backoff, RetryPolicy):
            raise RequestError("backoff must be a RetryPolicy", code="bad_argument")
        up = Updater(frame_id, fn, reason, max_attempts)
        if known is not None:
            up.known(known)
        return up, backoff or UPDATE_BACKOFF

    def _update_steps(
        self, up: Updater, policy: RetryPolicy, known: bool
    ) -> Generator[tuple[str, Any], Any, UpdateResult]:
        """The steps of one read-modify-write, written once for :meth:`update` and
        :meth:`update_async`: each yields what to do (``("read", frame_ids)``,
        ``("submit", payload)``, ``("sleep", seconds)``) and is sent what it answered."""
        if not known:
            up.read((yield ("read", [up.frame_id])))
        while True:
            tx, payload = self.prepare(up.tx())
            receipt = yield ("submit", payload)
            if up.outcome(tx, receipt) is not None:
                return up.result(receipt)
            if not up.rebased(receipt):
                up.read((yield ("read", [up.frame_id])))
            yield ("sleep", _retry_delay(policy, up.rejections))

    def update(
        self,
        frame_id: str,
        fn: UpdateFn,
        *,
        reason: str = "update",
        max_attempts: int = 100,
        known: dict[str, Any] | None = None,
        backoff: RetryPolicy | None = None,
    ) -> UpdateResult:
        """Read-modify-write *frame_id* with *fn* (frame state or None -> new body forms).

        One read, then one round trip per attempt: a ``conflict`` rejection carries
        the frame as it stands now, so the retry is rebuilt from the receipt after a
        jittered backoff (*backoff*, default :data:`UPDATE_BACKOFF`). *known* (an
        earlier :attr:`UpdateResult.frame`) skips the first read. Never commits an
        attempt twice (each carries its own client id); see :mod:`actors.client.updates`.
        """
        up, policy = self._updater(frame_id, fn, reason, max_attempts, known, backoff)
        steps = self._update_steps(up, policy, known is not None)
        answer: Any = None
        try:
            while True:
                what, value = steps.send(answer)
                if what == "read":
                    answer = self.read_for_update(value)
                elif what == "submit":
                    answer = self.submit_payload(value)
                else:
                    time.sleep(value)
                    answer = None
        except StopIteration as done:
            result: UpdateResult = done.value
            return result

    async def update_async(
        self,
        frame_id: str,
        fn: UpdateFn,
        *,
        reason: str = "update",
        max_attempts: int = 100,
        known: dict[str, Any] | None = None,
        backoff: RetryPolicy | None = None,
    ) -> UpdateResult:
        """:meth:`update` for event loops."""
        up, policy = self._updater(frame_id, fn, reason, max_attempts, known, backoff)
        steps = self._update_steps(up, policy, known is not None)
        answer: Any = None
        try:
            while True:
                what, value = steps.send(answer)
                if what == "read":
                    answer = await self.read_for_update.aio(value)
                elif what == "submit":
                    answer = await self.submit_payload_async(value)
                else:
                    await asyncio.sleep(value)
                    answer = None
        except StopIteration as done:
            result: UpdateResult = done.value
            return result

    # -- the agent loop -----------------------------------------------------------

    # -- introspection (answers are not enveloped; no capability) ---------------

    @Remote
    def handshake(self) -> Call[dict[str, Any]]:
        """Name, store directory, node, open error, tenant, project and enforcement."""
        return Call("handshake", (), _plain(dict), guarded=False)

    handshake_async = handshake.aio

    @Remote
    def stats(self) -> Call[dict[str, int]]:
        """Group-commit counters of the actor process: batches, transactions, …"""
        return Call("stats", (), _plain(dict))

    stats_async = stats.aio

    @Remote
    def describe(self) -> Call[dict[str, Any]]:
        """Name, store directory, node id, pid and open error of the actor."""
        return Call("describe", (), _plain(dict))

    describe_async = describe.aio

    @Remote
    def pid(self) -> Call[int]:
        """The actor's process id."""
        return Call("pid", (), _plain(int), guarded=False)

    pid_async = pid.aio

    @Remote
    def node_id(self) -> Call[str]:
        """The node the actor runs on."""
        return Call("node_id", (), _plain(str), guarded=False)

    node_id_async = node_id.aio

    @Remote
    def close(self) -> Call[None]:
        """Close the actor's store (advert removed, lock released); needs ``admin``."""
        return Call("close", (), lambda raw: None if raw is None else open_reply(raw))

    def shutdown(self, *, wait: float = 10.0) -> None:
        """Stop the actor for good: :meth:`close` (failing or not), then kill (wait <= *wait* s)."""
        with contextlib.suppress(MorphzError):
            self.close()
        self.transport.kill(wait=wait)


class _AsyncForm:
    """``handle.<operation>_async(...)``: ``handle.<operation>.aio(...)`` under the name
    every handle method's ``async`` form has."""

    def __init__(self, op: Operation[Any, Any]) -> None:
        self.op = op
        self.__doc__ = f":meth:`{op.name}` for event loops."

    def __get__(self, obj: ContextHandle | None, owner: type) -> Any:
        if obj is None:
            return self
        return Bound(self.op, obj).aio


for _op in operations():
    if _op.name + "_async" not in vars(ContextHandle):  # submit_async: with its timeout
        setattr(ContextHandle, _op.name + "_async", _AsyncForm(_op))
