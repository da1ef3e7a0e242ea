"""Where the CLI's write commands write: the store itself, or the context actor holding it.

``observe``, ``claim``, ``tx`` and ``deliver`` call :func:`writer_for`, which
answers a :class:`Writer` with the same four methods over either port:

* :class:`StoreWriter` — the embedded :class:`~service.context.Context`, when
  this process can take the store's writer lock (the usual case);
* :class:`ActorWriter` — the :class:`~actors.client.handle.ContextHandle` of the
  context actor that holds the lock (:class:`~protocol.errors.StoreLocked`).
  The actor is found through the store: while it holds the lock it writes its
  Ray address and namespace into ``<store>/<context>/actor.json``
  (:func:`actors.client.lookup.advertised`). ``--address`` (then ``RAY_ADDRESS``)
  names the cluster instead of the advert's address. The actor found must
  serve this very store directory (``context_elsewhere`` otherwise).

Both answer the same documents, so a command prints the same output and exits
with the same code either way. Ray is imported only on the actor path. A
store that is locked with no actor to be found stays ``store_locked`` (exit
1), with a hint; a cluster that cannot be joined is ``ray_unreachable``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import click

from protocol.errors import NotFound, StoreLocked

if TYPE_CHECKING:
    from actors.client.handle import ContextHandle
    from morphz.cli.console import Env
    from protocol.receipts import Receipt
    from protocol.txwire import SubmittedTx
    from service.context import Context

__all__ = ["ActorWriter", "StoreWriter", "Writer", "address_option", "writer_for"]

address_option = click.option(
    "--address",
    default=None,
    help="Ray address of the context actor holding the store (default: RAY_ADDRESS, else the"
    " address the actor advertises in the store); used only when an actor holds it.",
)
"""The ``--address`` option of the write commands (see :func:`writer_for`)."""


class Writer(Protocol):
    """The writes a CLI command makes, answered as the command prints them."""

    via: str
    """``"store"`` or ``"actor"``: which port carries the writes."""
    port: Any
    """The embedded context or the actor's handle: every registered operation
    (``port.merge(…)``, ``port.tag(…)``) answers the same reply on both."""

    def observe(self, kind: str, text: str, session: str) -> dict[str, Any]:
        """Record an observation: ``{"ref", "id", "kind", "session", "size"}``."""
        ...

    def claim(self) -> dict[str, Any]:
        """Claim the waiting inputs: ``{"tick", "advanced", "claimed", "finalized", "version"}``."""
        ...

    def commit(self, submitted: SubmittedTx, client_id: str | None) -> Receipt:
        """Commit one parsed transaction (logged with its text); its receipt."""
        ...

    def deliver(self, ref: str) -> dict[str, Any]:
        """Mark the user request *ref* delivered: ``{"ref", "id", "delivered"}``."""
        ...


def _doc(reply: Any) -> dict[str, Any]:
    """A reply (typed model, result object or mapping) as the plain dict a command prints."""
    for name in ("as_dict", "to_dict"):
        method = getattr(reply, name, None)
        if callable(method):
            return dict(method())
    return dict(reply)


def _observed(reply: Any, kind: str, text: str, session: str) -> dict[str, Any]:
    """What ``morphz observe`` prints for a recorded observation (size in characters)."""
    return {"ref": reply.ref, "id": reply.id, "kind": kind, "session": session, "size": len(text)}


class StoreWriter:
    """Writes through the embedded context this process holds open for writing."""

    via = "store"

    def __init__(self, ctx: Context) -> None:
        self.port = ctx
        self.ctx = ctx

    def observe(self, kind: str, text: str, session: str) -> dict[str, Any]:
        """:meth:`Writer.observe` on the store."""
        return _observed(self.ctx.observe(kind, text, session=session), kind, text, session)

    def claim(self) -> dict[str, Any]:
        """:meth:`Writer.claim` on the store."""
        return _doc(self.ctx.claim())

    def commit(self, submitted: SubmittedTx, client_id: str | None) -> Receipt:
        """:meth:`Writer.commit` on the store."""
        return self.ctx.commit_many([(submitted, client_id)])[0]

    def deliver(self, ref: str) -> dict[str, Any]:
        """:meth:`Writer.deliver` on the store."""
        return _doc(self.ctx.deliver(ref))


class ActorWriter:
    """Writes through the context actor that holds the store.

    A transaction sent without a client id gets one from the handle (so a
    lost reply is retried without committing twice); ``--json`` shows it.
    """

    via = "actor"

    def __init__(self, handle: ContextHandle) -> None:
        self.handle = handle
        self.port = handle

    def observe(self, kind: str, text: str, session: str) -> dict[str, Any]:
        """:meth:`Writer.observe` through the actor."""
        return _observed(self.handle.observe(kind, text, session=session), kind, text, session)

    def claim(self) -> dict[str, Any]:
        """:meth:`Writer.claim` through the actor."""
        return _doc(self.handle.claim())

    def commit(self, submitted: SubmittedTx, client_id: str | None) -> Receipt:
        """:meth:`Writer.commit` through the actor (the text as given is logged)."""
        tx = submitted.text if submitted.text is not None else submitted.tx
        return self.handle.submit(tx, client_id)

    def deliver(self, ref: str) -> dict[str, Any]:
        """:meth:`Writer.deliver` through the actor."""
        return _doc(self.handle.deliver(ref))


@contextmanager
def writer_for(env: Env, address: str | None = None, *, create: bool = False) -> Iterator[Writer]:
    """The :class:`Writer` of *env*'s context: the store, or the actor holding it.

    The store is opened for writing as ``env.open()`` opens it (*create*: a
    missing context is created, as ``--create`` asks); if a context
    actor holds it, the actor is found through its advert in the store (or in
    the cluster at *address*, else ``RAY_ADDRESS``). This process joins Ray
    for the command and leaves it afterwards. Raises ``StoreLocked`` when the
    store is locked and no actor can be found, ``NotFound`` when the cluster
    has no such actor, ``TransportError`` ``ray_unreachable`` when the cluster
    cannot be joined, ``RequestError`` ``context_elsewhere`` when the actor
    serves another store.
    """
    try:
        ctx = env.open(create=True) if create else env.open()
    except StoreLocked as e:
        locked = e
    else:
        with ctx:
            _clear_stale_advert(env)
            yield StoreWriter(ctx)
        return
    with _actor_writer(env, address, locked) as writer:
        yield writer


def _clear_stale_advert(env: Env) -> None:
    """Remove an advert left by a killed actor (this process holds the lock, so it is stale)."""
    from actors.client.names import advert_path

    try:
        os.unlink(advert_path(env.store, env.context))
    except OSError:
        pass


@contextmanager
def _actor_writer(env: Env, address: str | None, locked: StoreLocked) -> Iterator[Writer]:
    from actors.client.joining import init_ray, ray_module
    from actors.client.lookup import advertised, lookup
    from actors.client.names import DEFAULT_NAMESPACE

    advert = advertised(env.store, env.context)
    target = address or os.environ.get("RAY_ADDRESS") or (advert or {}).get("address")
    if not target:
        raise StoreLocked(
            f"{locked.message}; no context actor advertises itself in the store: "
            "pass --address (or set RAY_ADDRESS) to write through the actor that holds it"
        ) from locked
    namespace = str((advert or {}).get("namespace") or DEFAULT_NAMESPACE)
    connected = init_ray(target)
    try:
        try:
            handle = lookup(env.context, namespace, store_dir=env.store)
        except NotFound as e:
            raise NotFound(
                f"the store is locked but the Ray cluster at {target} has no context actor "
                f"{env.context!r} in namespace {namespace!r}; the writer may be another process"
            ) from e
        yield ActorWriter(handle)
    finally:
        if connected:
            ray_module().shutdown()
