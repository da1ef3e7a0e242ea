"""Deciding transactions: commit one or a group, or check one without writing.

The service functions of ``submit``, ``submit_many`` and ``check``
(:mod:`service.operations`), and the commit path the embedded
:meth:`~service.context.Context.commit` and the context actor's group-commit inbox
share (:func:`commit_many`). A transaction is a :class:`~protocol.tx.ContextTx`, its
S-expression text (parsed here, once; the log keeps the text), or a
:class:`~protocol.txwire.SubmittedTx` a port parsed already.

A remote port does not send a submission's checked arguments: it sends the wire
bytes :func:`wire_payload` makes (the parsed form beside the text, the client id
inside), which the context actor decodes into its group-commit inbox
(``carry=`` of the declaration, see :class:`service.registry.Carry`).
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard, cast

from pydantic import BeforeValidator, Field, PlainValidator
from pydantic_core import PydanticCustomError

from protocol.engine import evaluate
from protocol.errors import MorphzError, RequestError
from protocol.governance import EMBEDDED, rejection_entry
from protocol.ids import MAX_CLIENT_ID
from protocol.receipts import Receipt
from protocol.tx import ContextTx
from protocol.txwire import SubmittedTx, tx_to_msgpack
from protocol.view import BatchView, Changeset, WriteView
from protocol.wire import MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from service.context import Context

__all__ = [
    "MAX_SUBMIT_MANY",
    "ClientId",
    "Transaction",
    "TxItem",
    "WriteStep",
    "check",
    "commit",
    "commit_group",
    "commit_many",
    "new_client_id",
    "submit",
    "submit_many",
    "wire_payload",
    "wire_payloads",
]

MAX_SUBMIT_MANY = 1024
"""The most transactions one ``submit_many`` call carries."""


def new_client_id() -> str:
    """A fresh client id: ``c-`` and a uuid4 in hex."""
    return "c-" + uuid.uuid4().hex


def _client_id(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= MAX_CLIENT_ID):
        raise PydanticCustomError(
            "bad_client_id", f"a client id is 1 to {MAX_CLIENT_ID} characters", {}
        )
    return value


ClientId = Annotated[str, BeforeValidator(_client_id)]
"""A client id (1 to 200 characters): a retry under the same one answers the first receipt."""


def _transaction(value: Any) -> Any:
    # One isinstance test, not a union's trial validations: this is every submission's path.
    if isinstance(value, (ContextTx, SubmittedTx)):
        return value
    if isinstance(value, str):
        if len(value) > MAX_PAYLOAD_BYTES:
            raise PydanticCustomError(
                "string_too_long",
                f"a transaction's text holds at most {MAX_PAYLOAD_BYTES} characters",
                {},
            )
        return value
    raise PydanticCustomError(
        "bad_argument",
        f"a transaction is a ContextTx or its text, not {type(value).__name__}",
        {},
    )


Transaction = Annotated[ContextTx | SubmittedTx | str, PlainValidator(_transaction)]
"""A transaction argument: the model, a port's parsed form with its text, or the text
(at most :data:`~protocol.wire.MAX_PAYLOAD_BYTES` characters)."""


# -- the commit path ------------------------------------------------------------------


def _decide(
    w: WriteView, tx: ContextTx, text: str | None, agent: str | None, now: float
) -> Receipt:
    """Decide *tx* inside the write *w*: a commit writes its changes (the log record
    names *agent*), a rejection writes only its audit entry (the codes by which the
    inspector and ``morphz audit`` show what writers are refused)."""
    outcome = evaluate(w, tx, now=now, text=text)
    receipt = outcome.receipt
    if outcome.changes is not None:
        if agent is not None and outcome.changes.txlog is not None:
            outcome.changes.txlog["agent"] = agent
        w.apply(outcome.changes)
    elif not receipt.committed:
        entry = rejection_entry(receipt, client_id=tx.client_id, agent=agent or EMBEDDED, at=now)
        w.apply(Changeset(audit=[entry]))
    return receipt


def prepare(
    item: ContextTx | str | SubmittedTx | tuple[ContextTx | str | SubmittedTx, str | None],
) -> tuple[ContextTx, str | None, str | None]:
    """The transaction *item* names (a ``(tx, client_id)`` pair sets its client id), the
    text it was parsed from and the agent a port named; text is parsed here."""
    client_id: str | None = None
    if isinstance(item, tuple) and not isinstance(item, SubmittedTx):
        item, client_id = item
    text: str | None = None
    agent: str | None = None
    if isinstance(item, SubmittedTx):  # parsed once by the port that took it; log its text
        text, agent = item.text, item.agent
        item = item.tx
    elif isinstance(item, str):
        from protocol.txlang import parse_tx

        text = item
        item = parse_tx(item)
    if client_id is not None and client_id != item.client_id:
        if not 1 <= len(client_id) <= MAX_CLIENT_ID:
            raise RequestError(
                f"a client id is 1 to {MAX_CLIENT_ID} characters", code="bad_client_id"
            )
        item = item.model_copy(update={"client_id": client_id})
    return item, text, agent


def commit(ctx: Context, tx: ContextTx | str | SubmittedTx, client_id: str | None) -> Receipt:
    """Validate and commit one transaction durably in its own write; its receipt."""
    item, text, agent = prepare((tx, client_id))
    now = time.time()
    # One transaction per write: no batch view, the changeset (meta included)
    # goes straight to the store, as commit_many's batch of one would write it.
    return ctx.backend.transact(lambda w: _decide(w, item, text, agent, now))


TxItem = ContextTx | str | SubmittedTx | tuple[ContextTx | str | SubmittedTx, str | None]
"""A transaction of a group: a model, its text, a port's parsed form, or ``(tx, client_id)``."""

WriteStep = Callable[[WriteView], Any]
"""Another call's write riding a group (:meth:`service.registry.Operation.run_in` given its
checked arguments): it writes through the view and answers the call's reply."""


def commit_many(ctx: Context, txs: Sequence[TxItem]) -> list[Receipt]:
    """Group commit: each transaction decided in order against the state the previous ones
    left, all written in one durable write; a rejected one writes nothing of its own."""
    receipts: list[Receipt] = commit_group(ctx, txs)
    return receipts


class _Tracked:
    """The view one step of a group writes through: it notes whether the step applied
    anything (a step refused before that wrote nothing, so the group goes on)."""

    __slots__ = ("_w", "applied")

    def __init__(self, w: BatchView) -> None:
        self._w = w
        self.applied = False

    def apply(self, changes: Changeset) -> None:
        self.applied = True
        self._w.apply(changes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)


def commit_group(ctx: Context, items: Sequence[TxItem | WriteStep]) -> list[Any]:
    """One durable write for *items*, in order, each decided against the state the previous
    ones left: a transaction's receipt, a step's reply, or the typed error
    (:class:`~protocol.errors.MorphzError`) a step raised before applying anything (it
    wrote nothing; the others are kept). A step raising after it applied something, or any
    other error, aborts the whole write (nothing written) and is raised: the caller decides
    the items again one per write (the context actor's inbox does)."""
    prepared: list[tuple[ContextTx, str | None, str | None] | WriteStep] = [
        item if _is_step(item) else prepare(cast(TxItem, item)) for item in items
    ]
    now = time.time()

    def run(inner: WriteView) -> list[Any]:
        # Python's cyclic collector is paused while the group is decided: what the group
        # allocates and keeps until its end (records, changesets, receipts) would otherwise
        # be traversed and promoted by collections run in the middle of it, and, counted
        # as long-lived, bring on full collections of the whole heap (docs/storage.md,
        # "Where a group commit's CPU goes"). Its garbage is freed by reference counts as
        # usual; the collector is resumed, if it was running, when the decisions end.
        resume = gc.isenabled()
        gc.disable()
        try:
            w = BatchView(inner)
            out: list[Any] = []
            for item in prepared:
                if isinstance(item, tuple):
                    tx, text, agent = item
                    out.append(_decide(w, tx, text, agent, now))
                    continue
                view = _Tracked(w)
                try:
                    out.append(item(cast(WriteView, view)))
                except MorphzError as e:
                    if view.applied:
                        raise  # part of it is in the write: the write goes
                    out.append(e)
            w.flush()
            return out
        finally:
            if resume:
                gc.enable()

    return ctx.backend.transact(run)


def _is_step(item: object) -> TypeGuard[WriteStep]:
    return callable(item) and not isinstance(item, (ContextTx, SubmittedTx, str, tuple))


# -- the operations (declared in service.operations) ---------------------------------


def submit(ctx: Context, tx: Transaction, client_id: ClientId | None = None) -> Receipt:
    """Decide one transaction (a model or its text) and answer its durable receipt,
    committed or rejected.

    *client_id* (else the one inside *tx*, else a fresh one on a remote port) makes
    a retry safe: the same id answers the first receipt (``duplicate``). Text that
    does not parse is a ParseError: no transaction, so no receipt.
    """
    return commit(ctx, tx, client_id)


def submit_many(
    ctx: Context,
    txs: Annotated[list[Transaction], Field(min_length=1, max_length=MAX_SUBMIT_MANY)],
) -> list[Receipt]:
    """Decide several transactions in one call, in order, each on its own (a rejected one
    changes nothing for the others); their durable receipts, in order.

    Group-committed: one durable write for all that fit. Each carries its own
    client id (a remote port gives one to each that has none), so a retried call
    applies none twice.
    """
    return commit_many(ctx, txs)


def check(ctx: Context, tx: Transaction, client_id: ClientId | None = None) -> Receipt:
    """Dry run: the receipt *tx* would get if committed now; writes nothing.

    Decided by the engine against one read of the current state, exactly as a
    commit would be, so it runs on a read-only open too; a later commit may
    still differ if another writer commits in between.
    """
    item, text, _ = prepare((tx, client_id))
    now = time.time()
    return ctx.backend.read(lambda v: evaluate(v, item, now=now, text=text).receipt)


# -- how a remote port carries them ---------------------------------------------------


def _payload(tx: ContextTx | str | SubmittedTx, client_id: str | None) -> bytes:
    """The wire bytes of one submission, its client id settled (given, the one inside,
    else a fresh one, so every retry carries the same)."""
    item, text, _ = prepare((tx, client_id))
    if item.client_id is None:
        item = item.model_copy(update={"client_id": new_client_id()})
    return tx_to_msgpack(item, text)


def wire_payload(args: Any) -> tuple[bytes]:
    """What a remote port sends for ``submit`` (or ``check``): the wire bytes."""
    return (_payload(args.tx, args.client_id),)


def wire_payloads(args: Any) -> tuple[list[bytes]]:
    """What a remote port sends for ``submit_many``: the wire bytes of each."""
    return ([_payload(tx, None) for tx in args.txs],)
