"""Replicated contexts over Ray: the follower's role, and the primary's side of shipping.

A replicated context (``follower_count >= 1`` in its directory entry,
:mod:`actors.cluster.directory`) has one primary — the usual
:class:`~actors.server.context_actor.ContextActor` — and followers, each a
follower actor (:class:`~actors.cluster.follower.FollowerActor`) pinned to its
own node and holding a full copy of the store under that node's root. The rules
are :mod:`storage.replication`'s; this module only moves bytes:

* :class:`Replicator` is the primary's ``ship``: each batch goes to every
  follower at once and the write returns when ``acks`` of them answered that
  they hold it durably. A follower that reports a gap, or is new, is sent a
  snapshot of the primary's store instead (:func:`storage.replication.snapshot`).
  When too few answer, it re-reads the directory (the supervisor,
  :mod:`actors.cluster.failover`, may have replaced a lost follower) and tries again
  for :data:`SHIP_TIMEOUT` seconds before failing the write (``TransportError``
  ``replicas_unavailable``: durable on the primary, not acknowledged). A
  follower answering ``stale_epoch`` means a newer primary exists: the
  primary is fenced.
* :class:`FollowerRole` applies batches in order and serves reads at its
  *applied* state — only commits the primary has acknowledged — every reply
  saying so (:class:`FollowerRead`). It is what the Ray actor
  :class:`actors.cluster.follower.FollowerActor` does while a follower (a
  promotion turns that actor into the primary in place); the followers are
  started by whoever records them (:func:`actors.cluster.follower.start_follower`),
  never by the primary.

:func:`enable` is what the primary's host calls on open (and on
``replicate``) through the replication hook (:data:`REPLICATION`, an
:class:`actors.server.host.Replication`): if the directory names this actor the
primary of a replicated context, the store is wrapped in a
:class:`~storage.replication.ReplicatedStore` and every follower is brought to
the primary's state by snapshot before any write is accepted; if the directory
names another primary, the open fails with ``RequestError`` ``fenced``. Ray is
imported only when a function runs.

Kept as one module (over 600 lines) because both ends of the shipping protocol — the
primary's :class:`Replicator`, with its read lease, and the follower's
:class:`FollowerRole` — must agree on every message, epoch and answer.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from actors.client.lookup import directory_entry
from actors.client.names import DEFAULT_NAMESPACE, ContextEntry, Member
from actors.client.replies import failed, ok, open_reply
from actors.client.transport import Call, Transport, ray_module
from actors.cluster.liveness import Lease
from protocol.errors import (
    FENCED,
    REPLICA_GAP,
    STALE_EPOCH,
    MorphzError,
    RequestError,
    StoreLocked,
    TransportError,
)
from service.context import Context
from storage import LmdbStore, context_path
from storage.replication import (
    Follower,
    ReplicatedStore,
    install,
    snapshot,
)

log = logging.getLogger("morphz.replication")

SHIP_TIMEOUT = 30.0
"""Seconds a write waits for enough followers (re-reading the directory meanwhile)."""
INSTALL_TIMEOUT = 120.0
"""Seconds a follower may take to install a snapshot."""
LEASE_WAIT = 2.0
"""Seconds a primary waits for a follower's answer when renewing its read lease."""
LOCK_WAIT = 10.0
"""Seconds a starting follower waits for its store's writer lock."""
NAME_WAIT = 2.0
"""Seconds the primary waits for a follower's actor name to be registered."""
READS = frozenset(
    "frame state version snapshot read_event event history txlog meta frame_at"
    " read_for_update".split()
)
"""The reads a follower serves."""

__all__ = [
    "INSTALL_TIMEOUT",
    "LOCK_WAIT",
    "NAME_WAIT",
    "READS",
    "SHIP_TIMEOUT",
    "FollowerHandle",
    "FollowerRead",
    "REPLICATION",
    "DirectoryReplication",
    "FollowerRole",
    "Replicator",
    "check_not_replaced",
    "enable",
    "follower_handle",
    "replicated_entry",
]


class FollowerRead(BaseModel):
    """A read served by a follower: the reply, and the state it was read at.

    ``served_by`` is always ``"follower"``; ``applied_version`` the context
    version of the follower's state (every commit up to it is acknowledged by
    the primary, none after it is shown); ``applied_seq`` the last batch
    applied; ``held_seq`` the last batch held durably (may be ahead: commits
    not yet acknowledged); ``epoch`` the follower's fence.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    served_by: str
    node_id: str
    epoch: int
    applied_seq: int
    applied_version: int
    held_seq: int
    reply: Any


def _node_id() -> str:
    ray = ray_module()
    return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""


def _open_store(path: str) -> LmdbStore:
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            return LmdbStore.open(path, create=True)
        except StoreLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class FollowerRole:
    """What one follower of context *name* does: its copy under ``<store_dir>/<name>``
    on this node.

    A plain class (not a Ray actor): the follower actor
    (:class:`~actors.cluster.follower.FollowerActor`) answers its calls through it,
    one at a time (batches apply in the order the primary sent them). Every method
    answers a reply envelope.
    """

    def __init__(self, store_dir: str, name: str) -> None:
        self._name = name
        self._path = str(context_path(store_dir, name))
        self._error: MorphzError | None = None
        self._store: LmdbStore | None = None
        self._reader: Context | None = None
        self._follower: Follower | None = None
        try:
            self._open()
        except MorphzError as e:
            self._error = e

    def _open(self) -> None:
        self._store = _open_store(self._path)
        self._follower = Follower(self._store)

    def _close(self) -> None:
        if self._reader is not None:
            self._reader.backend.close()
            self._reader = None
        if self._store is not None:
            self._store.close()
            self._store = None
        self._follower = None

    def _live(self) -> Follower:
        if self._follower is None:
            if self._error is not None:
                raise self._error
            self._open()
        assert self._follower is not None
        return self._follower

    def _status(self) -> dict[str, Any]:
        f = self._live()
        return {
            "name": self._name,
            "path": self._path,
            "node_id": _node_id(),
            "epoch": f.state.epoch,
            "applied_seq": f.state.seq,
            "applied_version": f.state.version,
            "held_seq": f.held_seq,
        }

    def receive(self, data: bytes) -> bytes:
        """Hold batch *data* durably (apply what is acknowledged); the held sequence number."""
        try:
            return ok(self._live().receive(data))
        except MorphzError as e:
            return failed(e)

    def confirm(self, acked: int) -> bytes:
        """The primary acknowledged batches up to *acked*: apply them."""
        try:
            self._live().confirm(int(acked))
            return ok(None)
        except MorphzError as e:
            return failed(e)

    def status(self) -> bytes:
        """Epoch, applied and held batches, applied version, node."""
        try:
            return ok(self._status())
        except MorphzError as e:
            return failed(e)

    def fence(self, epoch: int) -> bytes:
        """Refuse batches of epochs before *epoch* from now on; the status after."""
        try:
            self._live().fence(int(epoch))
            return ok(self._status())
        except MorphzError as e:
            return failed(e)

    def install(self, data: bytes, epoch: int) -> bytes:
        """Replace this copy by the primary's snapshot *data*, fenced at *epoch*."""
        try:
            if self._follower is not None and self._follower.state.epoch > int(epoch):
                # a replaced primary (restarted before it learnt so) may not overwrite us
                raise RequestError(
                    f"a snapshot from epoch {epoch} is older than this follower's "
                    f"{self._follower.state.epoch}",
                    code=STALE_EPOCH,
                )
            self._close()
            install(self._path, data)
            self._open()
            self._live().fence(int(epoch))
            return ok(self._status())
        except MorphzError as e:
            return failed(e)

    def seal(self, epoch: int) -> bytes:
        """Before promotion: apply every held batch, fence at *epoch*, release the store."""
        try:
            f = self._live()
            f.drain()
            f.fence(int(epoch))
            status = self._status()
            self._close()
            self._error = RequestError(
                f"follower of {self._name!r} was sealed for promotion", code=FENCED
            )
            return ok(status)
        except MorphzError as e:
            return failed(e)

    def read(self, method: str, args: list[Any]) -> bytes:
        """Serve a read (:data:`READS`) at the applied state, saying so."""
        try:
            if method not in READS:
                raise RequestError(f"a follower serves {sorted(READS)}, not {method!r}")
            f = self._live()
            if self._reader is None:
                self._reader = Context(LmdbStore.open(self._path, readonly=True), name=self._name)
            reply = getattr(self._reader, method)(*args)
            dump = getattr(reply, "model_dump", None)
            value = dump() if callable(dump) else reply
            read = FollowerRead(
                served_by="follower",
                node_id=_node_id(),
                epoch=f.state.epoch,
                applied_seq=f.state.seq,
                applied_version=f.state.version,
                held_seq=f.held_seq,
                reply=value,
            )
            return ok(read.model_dump())
        except MorphzError as e:
            return failed(e)
        except TypeError as e:
            return failed(RequestError(f"bad arguments for {method}: {e}", code="bad_argument"))


class FollowerHandle:
    """A blocking handle of one follower: its status and the reads it serves."""

    def __init__(self, actor: Any, member: Member, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.member = member
        self.transport = Transport(actor, member.actor, label=member.actor, namespace=namespace)

    def status(self) -> dict[str, Any]:
        """Epoch, applied and held batches, applied version, node."""
        return dict(self.transport.call(Call("status", (), open_reply, guarded=False)))

    def read(self, method: str, *args: Any) -> FollowerRead:
        """Run the read *method* (:data:`READS`) on the follower's applied state."""
        if method not in READS:
            raise RequestError(f"a follower serves {sorted(READS)}, not {method!r}")
        raw = self.transport.call(Call("read", (method, list(args)), open_reply, guarded=False))
        return FollowerRead.model_validate(raw)


def follower_handle(member: Member, namespace: str = DEFAULT_NAMESPACE) -> FollowerHandle:
    """The handle of the running follower *member* (NotFound-free: Ray resolves it by name)."""
    actor = ray_module().get_actor(member.actor, namespace=namespace)
    return FollowerHandle(actor, member, namespace)


def _member_actor(member: Member, namespace: str) -> Any | None:
    """The running actor of *member*, waiting :data:`NAME_WAIT` seconds for its name (its
    starter registered it a moment ago, perhaps from another process); None if absent."""
    ray = ray_module()
    deadline = time.monotonic() + NAME_WAIT
    while True:
        try:
            return ray.get_actor(member.actor, namespace=namespace)
        except ValueError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)


class Replicator:
    """The primary's ``ship`` for context *name* under *entry*'s epoch (see the module doc)."""

    def __init__(self, name: str, namespace: str, entry: ContextEntry, me: str) -> None:
        self.name = name
        self.namespace = namespace
        self.entry = entry
        self.me = me
        self.store: ReplicatedStore | None = None
        self._actors: dict[Member, Any] = {}
        self.lease = Lease()
        """Reads are served only while it is live (:meth:`hold_lease`)."""

    def _inner(self) -> LmdbStore:
        assert self.store is not None
        return self.store.inner

    def _sync(self, members: list[Member]) -> list[Member]:
        """Bring *members* to this store's state by snapshot; those that took it."""
        if not members:
            return []
        assert self.store is not None
        with self.store.exclusive():  # no write between the snapshot and its install
            return self._install(members)

    def _install(self, members: list[Member]) -> list[Member]:
        ray = ray_module()
        data, _ = snapshot(self._inner())
        refs = {}
        for m in members:
            actor = self._actors.get(m) or _member_actor(m, self.namespace)
            if actor is None:  # not started (yet): the supervisor starts it
                log.warning("context %r: follower %s not running", self.name, m.actor)
                continue
            self._actors[m] = actor
            refs[m] = actor.install.remote(data, self.entry.epoch)
        done = []
        for m, ref in refs.items():
            try:
                open_reply(ray.get(ref, timeout=INSTALL_TIMEOUT))
                done.append(m)
            except Exception as e:  # a lost node, a dead actor: left to the supervisor
                log.warning("context %r: follower %s not synced: %s", self.name, m.actor, e)
                self._actors.pop(m, None)
        return done

    def adopt(self, entry: ContextEntry) -> None:
        """Follow *entry*'s members: new followers get a snapshot; gone ones are dropped."""
        if entry.epoch != self.entry.epoch or entry.primary.actor != self.me:
            raise RequestError(
                f"context {self.name!r} is now served by {entry.primary.actor} "
                f"(epoch {entry.epoch}); this primary ({self.me}) may not write",
                code=STALE_EPOCH,
            )
        keep = set(entry.followers)
        for m in list(self._actors):
            if m not in keep:
                del self._actors[m]
        self.entry = entry
        self._sync([m for m in entry.followers if m not in self._actors])

    def sync_all(self) -> None:
        """Snapshot every follower (on open: whatever they held is replaced)."""
        self._sync(list(self.entry.followers))

    def refresh(self) -> None:
        """Re-read this context's directory entry and adopt its followers; if it names
        another primary or a newer epoch, this primary fences itself (``stale_epoch``)."""
        entry = directory_entry(self.name, self.namespace)
        if entry is None:
            return
        try:
            self.adopt(entry)
        except MorphzError as e:
            if e.code == STALE_EPOCH and self.store is not None:
                self.store.fence(e.message)
            raise

    def fenced(self) -> MorphzError | None:
        """The ``fenced`` error once this primary knows it was replaced, else None."""
        return None if self.store is None else self.store.fenced_error

    def hold_lease(self) -> None:
        """Return if this primary may serve a read now: its lease is live, or renewed now by
        asking the followers (``max(1, acks)`` of them must answer as followers of its
        epoch). ``fenced`` if one answers from a newer epoch (this primary fences itself).
        Too few answers: the directory is re-read (a lost follower may have been replaced)
        and they are asked again, for up to :data:`SHIP_TIMEOUT` seconds, as a write
        waits; then ``replicas_unavailable``."""
        deadline: float | None = None
        while not self.lease.live(time.monotonic()):
            fenced = self.fenced()
            if fenced is not None:
                raise fenced
            got, need = self._renew()
            if got >= need:
                return
            deadline = deadline or time.monotonic() + SHIP_TIMEOUT
            try:
                self.refresh()
            except MorphzError as e:
                if e.code == STALE_EPOCH:
                    raise
            if time.monotonic() > deadline:
                raise TransportError(
                    f"context {self.name!r}: only {got} of {need} followers renewed the read "
                    "lease; a read here might miss commits of a newer primary",
                    code="replicas_unavailable",
                )
            time.sleep(0.2)

    def _renew(self) -> tuple[int, int]:
        """Ask every follower whether it still follows this epoch; renew the lease if
        enough do. How many did, and how many must."""
        ray = ray_module()
        asked = time.monotonic()
        refs = [a.status.remote() for a in self._actors.values()]
        need, got = max(1, self.entry.acks), 0
        for ref in refs:
            try:
                status = open_reply(ray.get(ref, timeout=LEASE_WAIT))
            except MorphzError as e:
                if e.code in (STALE_EPOCH, FENCED):  # promoted, or sealed to be: replaced
                    self._replaced(f"a follower answered {e.code}")
                log.info("context %r: a follower did not renew the lease: %s", self.name, e)
                continue
            except Exception as e:  # lost or slow: it does not vouch for this epoch
                log.info("context %r: a follower did not renew the lease: %s", self.name, e)
                continue
            if int(status["epoch"]) > self.entry.epoch:
                self._replaced(f"a follower is at epoch {status['epoch']}")
            got += 1
        if got >= need:
            self.lease.renewed(asked)
        return got, need

    def _replaced(self, why: str) -> None:
        """Fence this primary (a newer epoch exists) and raise ``fenced``."""
        message = f"context {self.name!r}: {why}, after this primary's epoch {self.entry.epoch}"
        if self.store is not None:
            self.store.fence(message)
        self.lease.lapse()
        raise RequestError(message, code=FENCED)

    def ship(self, seq: int, data: bytes) -> None:
        """Return once ``acks`` followers hold batch *seq* durably (see the module doc);
        with at least one follower's answer, that renews the read lease."""
        ray = ray_module()
        from ray.exceptions import RayError

        deadline = time.monotonic() + SHIP_TIMEOUT
        while True:
            need = self.entry.acks
            asked = time.monotonic()
            refs = {a.receive.remote(data): m for m, a in self._actors.items()}
            got, behind = 0, []
            pending = list(refs)
            while pending and got < need:
                left = max(0.0, deadline - time.monotonic())
                ready, pending = ray.wait(pending, num_returns=1, timeout=min(left, 5.0))
                if not ready:
                    break
                m = refs[ready[0]]
                try:
                    open_reply(ray.get(ready[0]))
                    got += 1
                except MorphzError as e:
                    if e.code == STALE_EPOCH:
                        raise
                    if e.code == REPLICA_GAP:
                        behind.append(m)
                    else:
                        log.warning("context %r: follower %s: %s", self.name, m.actor, e)
                except RayError as e:
                    log.warning("context %r: follower %s lost: %s", self.name, m.actor, e)
            if got < need and behind:
                got += len(self._sync(behind))
            if got >= need:
                if got >= 1:
                    self.lease.renewed(asked)
                return
            try:
                self.refresh()
            except MorphzError as e:
                if e.code == STALE_EPOCH:
                    raise
            if time.monotonic() > deadline:
                raise TransportError(
                    f"context {self.name!r}: only {got} of {need} followers hold the write "
                    f"(batch {seq}); it is durable on the primary but not acknowledged",
                    code="replicas_unavailable",
                )
            time.sleep(0.2)

    def confirm(self, acked: int) -> None:
        """Tell the followers the primary acknowledged up to *acked* (not awaited)."""
        for actor in self._actors.values():
            actor.confirm.remote(acked)


def replicated_entry(name: str, namespace: str | None) -> tuple[ContextEntry, str] | None:
    """The directory entry of a replicated context *name* and this actor's name, or None."""
    ray = ray_module()
    if not ray.is_initialized() or not namespace:
        return None
    me = ray.get_runtime_context().get_actor_name()
    if not me:
        return None
    try:
        entry = directory_entry(name, namespace)
    except MorphzError:
        return None
    if entry is None or not entry.replicated:
        return None
    return entry, me


def check_not_replaced(name: str, namespace: str | None) -> None:
    """``RequestError`` ``fenced`` if the directory names another actor the primary of
    the replicated context *name*: a replaced primary (a restart of the old one) never
    opens its store for writing again."""
    found = replicated_entry(name, namespace)
    if found is not None and found[0].primary.actor != found[1]:
        entry, me = found
        raise RequestError(
            f"context {name!r} is served by {entry.primary.actor} at epoch {entry.epoch}; "
            f"{me} was replaced and may not write",
            code=FENCED,
        )


def enable(ctx: Context, name: str, namespace: str | None) -> Replicator | None:
    """Replicate *ctx* if the directory says this actor is its primary (see the module doc).

    Returns None when the context is not replicated (no directory, no entry,
    ``follower_count == 0``); raises ``RequestError`` ``fenced`` when the directory
    names another primary. Call it on the store thread, before serving writes.
    """
    found = replicated_entry(name, namespace)
    if found is None or namespace is None:
        return None
    entry, me = found
    if entry.primary.actor != me:
        raise RequestError(
            f"context {name!r} is served by {entry.primary.actor} at epoch {entry.epoch}; "
            f"{me} was replaced and may not write",
            code=FENCED,
        )
    backend = ctx.backend
    inner = backend.inner if isinstance(backend, ReplicatedStore) else backend
    if not isinstance(inner, LmdbStore):
        raise RequestError("only an LMDB store can be replicated", code="bad_argument")
    replicator = Replicator(name, namespace, entry, me)
    store = ReplicatedStore(inner, epoch=entry.epoch, ship=replicator.ship)
    store.confirm = replicator.confirm
    replicator.store = store
    replicator.sync_all()
    ctx.backend = store
    if ctx._searcher is not None:  # rebuilt on the wrapped store on next use
        ctx._searcher.close()
        ctx._searcher = None
    return replicator


class DirectoryReplication:
    """The replication hook (:class:`actors.server.host.Replication`) of the contexts
    the cluster side places: what the context directory says decides whether a
    primary replicates, and to whom, and whether it was replaced."""

    def check_not_replaced(self, name: str, namespace: str | None) -> None:
        """:func:`check_not_replaced`."""
        check_not_replaced(name, namespace)

    def enable(self, ctx: Context, name: str, namespace: str | None) -> Replicator | None:
        """:func:`enable`."""
        return enable(ctx, name, namespace)


REPLICATION = DirectoryReplication()
"""The hook :func:`actors.cluster.placing.place` gives the primaries it starts."""
