"""Replicated contexts over Ray: the primary's side of shipping.

A replicated context (``follower_count >= 1`` in its directory entry,
:mod:`actors.cluster.directory`) has one primary — the usual
:class:`~actors.server.context_actor.ContextActor` — and followers, each a
follower actor (:class:`~actors.cluster.follower.FollowerActor`) pinned to its
own node and holding a full copy of the store under that node's root. The rules
are :mod:`storage.replication`'s; this module only moves bytes:

* :class:`Replicator` is the primary's ``ship``: each batch goes to every
  follower at once and the write returns when ``acks`` of them answered that
  they hold it durably. A follower that reports a gap is caught up from the
  primary's retained log when the log reaches back to the last batch it holds and
  its history is the primary's (:meth:`storage.replication.ReplicatedStore.tail`;
  one message per 8 MiB, every batch's chained MAC checked), else — and a new
  follower always — is sent a snapshot of the primary's store
  (:func:`storage.replication.snapshot`); :attr:`Replicator.caught_up` counts both.
  Every message carries a MAC under the context's replication key
  (:mod:`storage.replication.codec`), snapshots the directory's signature of the
  epoch.
  When too few answer, it re-reads the directory (the supervisor,
  :mod:`actors.cluster.failover`, may have replaced a lost follower) and tries again
  for :data:`SHIP_TIMEOUT` seconds before failing the write (``TransportError``
  ``replicas_unavailable``: durable on the primary, not acknowledged). A
  follower answering ``stale_epoch`` means a newer primary exists: the
  primary is fenced.
* the followers' side is :mod:`actors.cluster.follower_role`; the followers are
  started by whoever records them (:func:`actors.cluster.follower.start_follower`),
  never by the primary.

:func:`enable` is what the primary's host calls on open (and on
``replicate``) through the replication hook (:data:`REPLICATION`, an
:class:`actors.server.host.Replication`): if the directory names this actor the
primary of a replicated context, the store is wrapped in a
:class:`~storage.replication.ReplicatedStore`; a store that goes on with its chain
(:attr:`~storage.replication.ReplicatedStore.continued`: a promoted follower) sends
a snapshot only to the followers its log cannot catch up (:meth:`Replicator.reach_all`),
any other sends one to every follower (:meth:`Replicator.sync_all`), neither waiting:
each write waits for the ``acks`` it needs, and a follower taking a snapshot is
caught up from the log once it holds it. If the directory names another primary,
the open fails with ``RequestError`` ``fenced``. Ray is imported only when a
function runs.

Kept together in one module (about 600 lines): shipping, the one wait for enough
followers, catch-up, the read lease and the answers not waited for all work on the
same :class:`Replicator` state (its follower handles and its unheard answers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from actors.client.joining import ray_module
from actors.client.lookup import directory_entry
from actors.client.names import ContextEntry, Member
from actors.client.replies import open_reply
from actors.cluster.liveness import Lease, vouched
from protocol.errors import (
    FENCED,
    REPLICA_GAP,
    STALE_EPOCH,
    MorphzError,
    RequestError,
    TransportError,
)
from service.context import Context
from storage import LmdbStore
from storage.replication import ReplicatedStore, snapshot
from storage.replication.codec import (
    control_mac,
    install_mac,
    opened,
    replication_key,
)
from storage.replication.epochs import sign_epoch
from storage.replication.recording import retain_of

log = logging.getLogger("morphz.replication")

SHIP_TIMEOUT = 30.0
"""Seconds a write waits for enough followers (re-reading the directory meanwhile)."""
INSTALL_TIMEOUT = 120.0
"""Seconds a follower may take to install a snapshot."""
LEASE_WAIT = 2.0
"""Seconds a primary waits for a follower's answer when renewing its read lease."""
NAME_WAIT = 2.0
"""Seconds the primary waits for a follower's actor name to be registered."""
CATCH_UP_BYTES = 8 << 20
REACH_WAIT = 0.5
"""Seconds an open that goes on with the chain waits for its followers' status."""
MAX_UNHEARD = 4096
"""Answers a primary keeps to look at later, at most (the oldest are forgotten)."""
"""Most bytes of batches one catch-up message carries (more go in several, in order)."""


def chunk_batches(batches: list[bytes]) -> list[list[bytes]]:
    """*batches* cut, in order, into messages of at most :data:`CATCH_UP_BYTES` (each at
    least one batch)."""
    out: list[list[bytes]] = [[]]
    size = 0
    for data in batches:
        if out[-1] and size + len(data) > CATCH_UP_BYTES:
            out.append([])
            size = 0
        out[-1].append(data)
        size += len(data)
    return out if out[0] else []


__all__ = [
    "CATCH_UP_BYTES",
    "catch_up_member",
    "chunk_batches",
    "INSTALL_TIMEOUT",
    "NAME_WAIT",
    "SHIP_TIMEOUT",
    "REPLICATION",
    "DirectoryReplication",
    "Replicator",
    "check_not_replaced",
    "enable",
    "replicated_entry",
    "sign_epoch",
]


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


def catch_up_member(
    store: ReplicatedStore, key: bytes, epoch: int, call: Callable[..., Any]
) -> int | None:
    r"""Bring one follower up to *store* (the primary's, at *epoch*) from its retained log:
    the number of batches sent (0: it held them all); None, having sent nothing, when the
    log cannot (the follower needs a snapshot).

    *call(method, \*args)* calls the follower and answers its opened reply: its
    ``status`` (the last batch it holds and that batch's MAC) decides
    (:meth:`~storage.replication.ReplicatedStore.tail`); the missing batches then go in
    ``catch_up`` messages of at most :data:`CATCH_UP_BYTES`, each MACed under *key*."""
    status = call("status")
    batches = store.tail(int(status["held_seq"]), bytes.fromhex(str(status["head"])))
    if batches is None:
        return None
    for chunk in chunk_batches(batches):
        acked = store.acked
        call("catch_up", epoch, acked, chunk, control_mac(
            key, "catch_up", epoch, acked, opened(chunk[-1])[0]))  # fmt: skip
    return len(batches)


class Replicator:
    """The primary's ``ship`` for context *name* under *entry*'s epoch (see the module doc)."""

    def __init__(self, name: str, namespace: str, entry: ContextEntry, me: str) -> None:
        self.name = name
        self.namespace = namespace
        self.entry = entry
        self.me = me
        self.store: ReplicatedStore | None = None
        self._actors: dict[Member, Any] = {}
        self._key = replication_key(name)
        self.caught_up = {"log": 0, "snapshot": 0}
        """How many times a follower was brought up to date from the retained log (batches
        sent), and by a snapshot (a new follower, one beyond the log, or one whose history
        diverged)."""
        self.lease = Lease()
        """Reads are served only while it is live (:meth:`hold_lease`)."""
        self._unheard: dict[Any, tuple[Member, str]] = {}
        """Answers not waited for (object ref -> the follower and ``receive``/``install``),
        oldest first: looked at by the next ship (:meth:`_hear`)."""

    def _inner(self) -> LmdbStore:
        assert self.store is not None
        return self.store.inner

    def _sync(self, members: list[Member], *, wait: bool = True) -> list[Member]:
        """Bring *members* to this store's state by snapshot; those that took it (*wait*),
        or those it was sent to (not *wait*: their answers are looked at by a later ship,
        and every batch shipped meanwhile reaches them after the snapshot)."""
        if not members:
            return []
        assert self.store is not None
        with self.store.exclusive():  # no write between the snapshot and its sending
            return self._install(members, wait)

    def _install(self, members: list[Member], wait: bool) -> list[Member]:
        ray = ray_module()
        data, _ = snapshot(self._inner())
        mac = install_mac(self._key, self.entry.epoch, data)
        cert = bytes.fromhex(self.entry.epoch_signature)
        refs = {}
        for m in members:
            actor = self._actors.get(m) or _member_actor(m, self.namespace)
            if actor is None:  # not started (yet): the supervisor starts it
                log.warning("context %r: follower %s not running", self.name, m.actor)
                continue
            self._actors[m] = actor
            refs[m] = actor.install.remote(data, self.entry.epoch, cert, mac)
        if not wait:
            for m, ref in refs.items():
                self._unheard[ref] = (m, "install")
            return list(refs)
        done = []
        for m, ref in refs.items():
            try:
                open_reply(ray.get(ref, timeout=INSTALL_TIMEOUT))
                done.append(m)
                self.caught_up["snapshot"] += 1
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
        self._sync([m for m in entry.followers if m not in self._actors], wait=False)

    def progress(self) -> dict[str, Any]:
        """``seq`` (the last batch written here), ``acked`` (the last acknowledged),
        ``continued`` (whether this primary went on with its store's chain when it opened:
        :attr:`storage.replication.ReplicatedStore.continued`) and ``caught_up``
        (:attr:`caught_up`)."""
        store = self.store
        return {
            "seq": 0 if store is None else store.state.seq,
            "acked": 0 if store is None else store.acked,
            "continued": store is not None and store.continued,
            "caught_up": dict(self.caught_up),
        }

    def reach_all(self, fresh: frozenset[str] = frozenset()) -> None:
        """On an open that goes on with the chain: send a snapshot, not waited for, to the
        followers the supervisor recruited for this promotion (*fresh*: actor names; a
        replacement holds nothing of this chain) without asking them; ask every other
        follower what it holds (for at most :data:`REACH_WAIT` seconds) and snapshot those
        the log cannot catch up too; the others, and those that did not answer yet, are
        caught up at the first batch they cannot take (``replica_gap``), from the log if
        they hold a prefix of this store's chain (a promoted follower's fellow followers),
        else by snapshot. A snapshot thus travels while a promoted follower waits out the
        replaced primary's lease."""
        ray = ray_module()
        assert self.store is not None
        for m in self.entry.followers:
            actor = self._actors.get(m) or _member_actor(m, self.namespace)
            if actor is None:  # not started (yet): the supervisor starts it
                log.warning("context %r: follower %s not running", self.name, m.actor)
                continue
            self._actors[m] = actor
        self._sync([m for m in self._actors if m.actor in fresh], wait=False)
        refs = {a.status.remote(): m for m, a in self._actors.items() if m.actor not in fresh}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=REACH_WAIT)
        stale = []
        for ref in ready:
            try:
                status = open_reply(ray.get(ref))
            except Exception as e:  # left to the first batch
                log.info("context %r: follower %s: %s", self.name, refs[ref].actor, e)
                continue
            if self.store.tail(int(status["held_seq"]), bytes.fromhex(str(status["head"]))) is None:
                stale.append(refs[ref])
        self._sync(stale, wait=False)

    def sync_all(self) -> None:
        """Snapshot every follower (on open: whatever they held is replaced), without
        waiting for them: a write waits only for the ``acks`` it needs, so a follower still
        starting (a replacement) delays no write that enough others acknowledge."""
        self._sync(list(self.entry.followers), wait=False)

    def refresh(self) -> None:
        """Re-read this context's directory entry and adopt its followers (looking at the
        answers not waited for first: :meth:`_hear`); if it names another primary or a
        newer epoch, this primary fences itself (``stale_epoch``)."""
        entry = directory_entry(self.name, self.namespace)
        if entry is None:
            return
        try:
            self._hear()
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
        Too few answers: they are asked again as a write's followers are
        (:meth:`_enough`); then ``replicas_unavailable``."""
        if self.lease.live(time.monotonic()):
            return
        self._enough(
            self._renew,
            "renewed the read lease; a read here might miss commits of a newer primary",
        )

    def _enough(self, ask: Callable[[], tuple[int, int]], what: str) -> None:
        """The one wait of a write's acknowledgements and a read lease's renewal: *ask*
        (``(answered, needed)``) until enough followers answered; between two tries, the
        directory is re-read (the supervisor may have replaced a lost follower; a newer
        primary there fences this one: ``stale_epoch``), for up to :data:`SHIP_TIMEOUT`
        seconds, then ``replicas_unavailable`` ("only *answered* of *needed* followers
        *what*")."""
        deadline = time.monotonic() + SHIP_TIMEOUT
        while True:
            fenced = self.fenced()
            if fenced is not None:
                raise fenced
            got, need = ask()
            if got >= need:
                return
            try:
                self.refresh()
            except MorphzError as e:
                if e.code == STALE_EPOCH:
                    raise
            if time.monotonic() > deadline:
                raise TransportError(
                    f"context {self.name!r}: only {got} of {need} followers {what}",
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
        self._vouched(got, asked)
        return got, need

    def _vouched(self, got: int, asked: float) -> None:
        """*got* followers (distinct, each of this primary's entry) answered as followers of
        its epoch after *asked*: renew the lease if they vouch for it
        (:func:`~actors.cluster.liveness.vouched`: ``max(1, acks)`` of them, and every
        follower of the entry when ``acks`` covers them all, which lets a promoted follower
        count the replaced lease from its own last answer: docs/cluster.md)."""
        entry = self.entry
        if vouched(got, entry.acks, entry.follower_count, len(entry.followers)):
            self.lease.renewed(asked)

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
        self._enough(
            lambda: self._ship_once(data),
            f"hold the write (batch {seq}); it is durable on the primary but not acknowledged",
        )

    def _ship_once(self, data: bytes) -> tuple[int, int]:
        """Send *data* to every follower; how many hold it, and how many must (``acks``).
        The answers not waited for (beyond ``acks``, or all of them with ``acks = 0``)
        are looked at by the next ship (:meth:`_hear`), so a follower behind is caught up
        whatever ``acks`` is. A follower still taking a snapshot is sent nothing (Ray may
        deliver a small call before a large one sent earlier): once it holds the snapshot,
        it is caught up from the log."""
        ray = ray_module()
        self._hear()
        need = self.entry.acks
        asked = time.monotonic()
        installing = self._installing()
        refs = {
            a.receive.remote(data): m for m, a in self._actors.items() if m not in installing
        }
        deadline = asked + SHIP_TIMEOUT
        got, behind = 0, list[Member]()
        pending = list(refs)
        while pending and got < need:
            left = max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=min(left, 5.0))
            if not ready:
                break
            if self._heard(ready[0], refs[ready[0]], "receive", behind):
                got += 1
        for ref in pending:
            self._unheard[ref] = (refs[ref], "receive")
        if got < need and behind:
            got += len(self._catch_up(behind))
        if got < need and installing:
            left = max(0.0, deadline - time.monotonic())
            ray.wait(list(installing.values()), num_returns=len(installing), timeout=min(left, 5.0))
            got += len([m for m in self._hear() if m in installing])
        self._vouched(got, asked)
        return got, need

    def _installing(self) -> dict[Member, Any]:
        """The followers sent a snapshot whose answer is not heard yet, and its object ref."""
        return {m: ref for ref, (m, kind) in self._unheard.items() if kind == "install"}

    def _heard(self, ref: Any, m: Member, kind: str, behind: list[Member]) -> bool:
        """Whether follower *m*'s answer *ref* (to a ``receive`` or an ``install``) says it
        holds what it was sent; one answering ``replica_gap`` goes into *behind*; a lost
        one (or a failed snapshot) is dropped until the directory names it again;
        ``stale_epoch`` (a newer primary exists) is raised."""
        from ray.exceptions import RayError

        ray = ray_module()
        try:
            open_reply(ray.get(ref))
            return True
        except MorphzError as e:
            if e.code == STALE_EPOCH:
                raise
            if e.code in (REPLICA_GAP, "bad_mac"):  # its status decides: log or snapshot
                behind.append(m)
            else:
                log.warning("context %r: follower %s: %s", self.name, m.actor, e)
                if kind == "install":
                    self._actors.pop(m, None)
        except RayError as e:
            log.warning("context %r: follower %s lost: %s", self.name, m.actor, e)
            if kind == "install":
                self._actors.pop(m, None)
        return False

    def _hear(self) -> list[Member]:
        """Look at the answers earlier ships and snapshots did not wait for: the followers
        that answered ``replica_gap`` (with ``acks = 0`` nothing else would notice) and
        those that took their snapshot are caught up (from the log); those brought up to
        date."""
        if not self._unheard:
            return []
        ray = ray_module()
        refs = list(self._unheard)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        behind: list[Member] = []
        for ref in ready:
            m, kind = self._unheard.pop(ref)
            if m not in self._actors:
                continue
            if self._heard(ref, m, kind, behind):
                if kind == "install":
                    self.caught_up["snapshot"] += 1
                    behind.append(m)  # the batches written since the snapshot: the log
            elif kind == "install":
                log.warning("context %r: follower %s did not take its snapshot", self.name, m.actor)
        while len(self._unheard) > MAX_UNHEARD:  # a follower that stopped answering
            del self._unheard[next(iter(self._unheard))]
        installing = self._installing()
        behind = [m for m in dict.fromkeys(behind) if m in self._actors and m not in installing]
        return self._catch_up(behind) if behind else []

    def _catch_up(self, members: list[Member]) -> list[Member]:
        """Bring *members* (behind: they answered ``replica_gap``) up to this store: from
        the retained log when :func:`catch_up_member` can, else by snapshot; those brought
        up to date."""
        ray = ray_module()
        assert self.store is not None
        done, rest = [], []
        for m in members:
            actor = self._actors[m]

            def call(method: str, *args: Any, actor: Any = actor) -> Any:
                ref = getattr(actor, method).remote(*args)
                return open_reply(ray.get(ref, timeout=INSTALL_TIMEOUT))

            try:
                sent = catch_up_member(self.store, self._key, self.entry.epoch, call)
                if sent is not None:
                    self.caught_up["log"] += 1 if sent else 0
                    done.append(m)
                    continue
            except MorphzError as e:
                if e.code == STALE_EPOCH:
                    raise
                log.warning("context %r: follower %s not caught up from the log: %s",
                            self.name, m.actor, e)  # fmt: skip
            except Exception as e:  # a lost node, a dead actor: a snapshot, else the supervisor
                log.warning("context %r: follower %s not caught up: %s", self.name, m.actor, e)
            rest.append(m)
        return done + self._sync(rest)

    def confirm(self, acked: int) -> None:
        """Tell the followers the primary acknowledged up to *acked* (not awaited)."""
        epoch = self.entry.epoch
        mac = control_mac(self._key, "confirm", epoch, acked)
        for actor in self._actors.values():
            actor.confirm.remote(epoch, acked, mac)


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


def enable(
    ctx: Context, name: str, namespace: str | None, fresh: frozenset[str] = frozenset()
) -> Replicator | None:
    """Replicate *ctx* if the directory says this actor is its primary (see the module doc).
    *fresh*: the followers (actor names) recruited for the promotion that opens it, sent a
    snapshot at once (:meth:`Replicator.reach_all`).

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
    settings = ctx.settings() or {}
    store = ReplicatedStore(
        inner, epoch=entry.epoch, ship=replicator.ship, retain=retain_of(settings)
    )
    store.confirm = replicator.confirm
    replicator.store = store
    if store.continued:  # its chain goes on: a follower behind is caught up when it says so
        replicator.reach_all(fresh)
    else:
        replicator.sync_all()
    ctx.backend = store
    if ctx._searcher is not None:  # rebuilt on the wrapped store on next use
        ctx._searcher.close()
        ctx._searcher = None
    return replicator


class DirectoryReplication:
    """The replication hook (:class:`actors.server.host.Replication`) of the contexts
    the cluster side places: what the context directory says decides whether a
    primary replicates, and to whom, and whether it was replaced. *fresh*: a promoted
    follower's new followers, snapshotted without being asked (:func:`enable`)."""

    def __init__(self, fresh: frozenset[str] = frozenset()) -> None:
        self.fresh = fresh

    def check_not_replaced(self, name: str, namespace: str | None) -> None:
        """:func:`check_not_replaced`."""
        check_not_replaced(name, namespace)

    def enable(self, ctx: Context, name: str, namespace: str | None) -> Replicator | None:
        """:func:`enable`."""
        return enable(ctx, name, namespace, self.fresh)


REPLICATION = DirectoryReplication()
"""The hook :func:`actors.cluster.placing.place` gives the primaries it starts."""
