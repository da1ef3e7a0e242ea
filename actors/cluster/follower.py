"""A replicated context's follower actor: a follower that is promoted in place.

:class:`FollowerActor` is the Ray actor every follower runs as. While a follower
it answers the follower's calls (``receive``, ``confirm``, ``status``,
``fence``, ``install``, ``seal``, ``read``) through a
:class:`~actors.cluster.follower_role.FollowerRole`; :meth:`FollowerActor.become_primary`
turns it into the context's primary in the same process, over the store it
already holds: the supervisor (:mod:`actors.cluster.failover`) calls it once the
directory names this actor the primary under the new epoch. Promotion thus
starts no Ray worker: the process is warm and its store is on its disk.

Why a subclass of :class:`~actors.server.context_actor.ContextActor`: a Ray actor
answers only the methods of its class, and a promoted follower must answer
every call a primary does. Until promoted, the primary's calls are not
served (the host is not set up); clients never make them, since they reach a
context through the directory, which names its primary.

Ordering: the follower's methods are plain (not ``async``) methods of an async
actor, so Ray runs them one at a time on the actor's event loop, in the order
they start; a batch that overtakes another is refused as a gap
(``replica_gap``) and the primary sends a snapshot, so order is never assumed.

A restart (Ray reruns the constructor) asks the directory first: a follower actor the
directory names as primary opens as the primary again; any other opens as a
follower. Ray is imported only when a function runs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from actors.client.joining import ray_module, remote_class
from actors.client.lookup import directory_entry
from actors.client.names import DEFAULT_NAMESPACE, ContextEntry, Member
from actors.client.nodes import pinned
from actors.client.replies import failed, open_reply
from actors.client.transport import Call
from actors.cluster.follower_role import FollowerRole, actor_name, node_id
from actors.cluster.liveness import Grants, every_follower_vouches, replaced_lease_over
from actors.cluster.replication import REPLICATION, DirectoryReplication, replicated_entry
from actors.cluster.spares import assignment_of, check_assignment, is_spare, record_assignment
from actors.server.connect import CONCURRENCY_GROUPS, MAX_CONCURRENCY
from actors.server.context_actor import ContextActor
from protocol.errors import PROMOTING, STALE_EPOCH, MorphzError, RequestError
from storage import check_context_name
from storage.replication.epochs import check_epoch

__all__ = ["DENIALS_EVERY", "DENIALS_WAIT", "FollowerActor", "start_follower", "start_followers"]

log = logging.getLogger("morphz.replication")

DENIALS_EVERY = 0.5
"""Seconds a follower gathers read denials before sending them to the primary's audit log."""
DENIALS_WAIT = 10.0
"""Seconds it waits for the primary to write them."""


class FollowerActor(ContextActor):
    """A follower of context *name* (its copy under ``<store_dir>/<name>``) that
    :meth:`become_primary` promotes in place; see the module doc."""

    def __init__(self, store_dir: str, name: str | None, namespace: str | None = None) -> None:
        self._store_root = store_dir
        self._context_name = name or ""
        self._namespace_of = namespace
        self._role: FollowerRole | None = None
        self._promoted = False
        self._sealed_at: float | None = None
        self._forwarding: threading.Timer | None = None
        if name is None:  # a spare: idle unless it was assigned before a restart
            found_spare = self._assignment()
            if found_spare is None:
                return
            self._store_root, self._context_name = found_spare
        self._open_role()

    def _open_role(self) -> None:
        found = replicated_entry(self._context_name, self._namespace_of)
        if found is not None and found[0].primary.actor == found[1]:
            self._host()  # a restart of a promoted follower: it is the primary
        else:
            self._role = FollowerRole(self._store_root, self._context_name)

    def _assignment(self) -> tuple[str, str] | None:
        """What this spare was assigned (:mod:`actors.cluster.spares`), None while idle."""
        me = ray_module().get_runtime_context().get_actor_name()
        if not me or not self._namespace_of:
            return None
        return assignment_of(self._namespace_of, me)

    def assign(self, record: bytes) -> bytes:
        """Serve as a follower of the context the signed assignment *record* names
        (:func:`actors.cluster.spares.sign_assignment`; recorded first, so a restart keeps
        it); the follower's status. Idempotent; ``bad_signature`` for a record that does not
        verify under the directory's public keys or was made for another spare (the spare
        stays idle), ``bad_argument`` for a follower of another context or a bad name."""
        try:
            me = ray_module().get_runtime_context().get_actor_name()
            if not me or not is_spare(me) or not self._namespace_of:
                raise RequestError("only a spare takes an assignment", code="bad_argument")
            try:
                store_dir, name = check_assignment(self._namespace_of, me, record)
            except RequestError as e:
                log.error("spare %s: assignment refused: %s", me, e.message)
                raise
            check_context_name(name)
            if self._context_name:
                if (self._store_root, self._context_name) != (store_dir, name):
                    raise RequestError(
                        f"this actor follows context {self._context_name!r} already",
                        code="bad_argument",
                    )
            else:
                record_assignment(self._namespace_of, me, record)
                self._store_root, self._context_name = store_dir, name
                self._open_role()
        except MorphzError as e:
            return failed(e)
        return self._as_follower("status")

    def _host(self, fresh: frozenset[str] = frozenset()) -> None:
        ContextActor.__init__(
            self, self._store_root, self._context_name, create=False,
            namespace=self._namespace_of,
            replication=DirectoryReplication(fresh) if fresh else REPLICATION,
        )  # fmt: skip
        self._promoted = True

    def _ensure_worker(self) -> None:
        """Before each primary call: the directory records a promotion before this actor's
        :meth:`become_primary` runs, so a client may reach it first; it answers
        ``promoting`` (which the client's transport calls again) instead of serving a
        context it has not opened."""
        if "_every" not in vars(self):  # ContextActor's state: set up by _host() alone
            raise RequestError(
                f"follower of {self._context_name!r} is not serving as the primary yet",
                code=PROMOTING,
            )
        super()._ensure_worker()

    async def replicate(self) -> bytes:
        """The primary's :meth:`~actors.server.host.ContextHost.replicate` once promoted;
        ``promoting`` before (the supervisor may call it as soon as the directory names
        this actor)."""
        try:
            self._ensure_worker()
        except RequestError as e:
            return failed(e)
        return await super().replicate()

    async def follower_denials(self, message: bytes) -> bytes:
        """The primary's :meth:`~actors.server.host.ContextHost.follower_denials` once
        promoted; ``promoting`` before (a fellow follower may send them as soon as the
        directory names this actor)."""
        try:
            self._ensure_worker()
        except RequestError as e:
            return failed(e)
        return await super().follower_denials(message)

    def _follower(self) -> FollowerRole:
        if not self._context_name:
            raise RequestError("this spare follows no context yet", code="not_found")
        if self._role is None:
            raise RequestError(
                f"this follower actor of {self._context_name!r} is its primary now",
                code=STALE_EPOCH,
            )
        return self._role

    def _as_follower(self, method: str, *args: Any) -> bytes:
        try:
            follower = self._follower()
        except RequestError as e:
            return failed(e)
        result: bytes = getattr(follower, method)(*args)
        return result

    def receive(self, data: bytes) -> bytes:
        """Hold batch *data* durably (:meth:`FollowerRole.receive`)."""
        return self._as_follower("receive", data)

    def catch_up(self, epoch: int, acked: int, batches: list[bytes], mac: bytes) -> bytes:
        """Hold the primary's retained batches at once (:meth:`FollowerRole.catch_up`)."""
        return self._as_follower("catch_up", epoch, acked, batches, mac)

    def confirm(self, epoch: int, acked: int, mac: bytes) -> bytes:
        """Apply what the primary acknowledged (:meth:`FollowerRole.confirm`)."""
        return self._as_follower("confirm", epoch, acked, mac)

    def status(self) -> bytes:
        """Epoch, applied and held batches (:meth:`FollowerRole.status`)."""
        return self._as_follower("status")

    def fence(self, epoch: int, cert: bytes) -> bytes:
        """Refuse batches of older epochs (:meth:`FollowerRole.fence`)."""
        return self._as_follower("fence", epoch, cert)

    def install(self, data: bytes, epoch: int, cert: bytes, mac: bytes) -> bytes:
        """Replace this copy by a snapshot (:meth:`FollowerRole.install`)."""
        return self._as_follower("install", data, epoch, cert, mac)

    def seal(self, epoch: int, cert: bytes) -> bytes:
        """Apply every held batch and release the store (:meth:`FollowerRole.seal`)."""
        started = time.monotonic()
        reply = self._as_follower("seal", epoch, cert)
        if self._sealed_at is None and self._role is not None and self._role.sealed:
            self._sealed_at = started  # a refused (forged) seal does not shorten the wait
        return reply

    def read(self, method: str, args: list[Any], capability: Any = None) -> bytes:
        """A read at the applied state, checked as on the primary (:meth:`FollowerRole.read`);
        a denial goes to the primary's audit log within :data:`DENIALS_EVERY` seconds."""
        reply = self._as_follower("read", method, args, capability)
        if (
            self._role is not None
            and self._role.pending_denials
            and (self._forwarding is None or not self._forwarding.is_alive())
        ):
            self._forwarding = threading.Timer(DENIALS_EVERY, self._forward_denials)
            self._forwarding.daemon = True
            self._forwarding.start()
        return reply

    def _forward_denials(self) -> None:
        """Send the denials held to the primary's ``follower_denials`` (on a timer thread,
        :data:`DENIALS_EVERY` s after the first, so a burst goes in one message); a primary
        that cannot be reached loses them, logged."""
        role = self._role
        message = None if role is None else role.take_denials(actor_name(), node_id())
        if message is None:
            return
        namespace = self._namespace_of or DEFAULT_NAMESPACE
        try:
            ray = ray_module()
            entry = directory_entry(self._context_name, namespace)
            if entry is None:
                raise RequestError("the context has no directory entry", code="not_found")
            primary = ray.get_actor(entry.primary.actor, namespace=namespace)
            ref = primary.follower_denials.remote(message)
            open_reply(ray.get(ref, timeout=DENIALS_WAIT))
        except Exception as e:  # the primary is away: the denials are logged here only
            log.warning("context %r: follower read denials not written to the audit log: %s",
                        self._context_name, e)  # fmt: skip

    async def become_primary(
        self, epoch: int, cert: bytes, fresh: list[str] | None = None
    ) -> dict[str, Any]:
        """Serve as the primary at *epoch*, over the store this follower holds.

        Call once the directory names this actor the primary at *epoch*; the
        follower is sealed first if it was not (everything held applied, its
        store released), then the context opens here as it does in a new
        primary (replication set up from the directory, every other follower
        snapshotted: *fresh*, the followers the supervisor recruited for this promotion,
        at once). Idempotent; answers what ``handshake`` answers. *cert* is the
        directory's certificate that this member is the primary at *epoch* (the entry's
        ``epoch_signature``): without it nothing happens (``bad_signature``), and the one
        the directory publishes for another member cannot promote (or seal) this one.
        """
        check_epoch(self._context_name, epoch, cert, ("epoch",), actor_name())
        if not self._promoted:
            grants = Grants()  # nothing known (a restarted process): counted from the seal
            if self._role is not None:
                if self._sealed_at is None:
                    self._sealed_at = time.monotonic()
                self._role.sealed_for(epoch)  # a failed reply if already sealed
                grants = self._role.grants
                self._role = None
            self._host(frozenset(str(a) for a in fresh or ()))
            self._outwait_lease(epoch - 1, grants)
        info: dict[str, Any] = await self.handshake()
        return info

    def _outwait_lease(self, replaced: int, grants: Grants) -> None:
        """Hold the store thread until the read lease of the primary of epoch *replaced*
        has expired (:func:`~actors.cluster.liveness.replaced_lease_over`): every follower
        was fenced before this one was sealed, so that primary renewed its lease last
        before the seal — and, when every renewal needed this follower's answer, before
        this follower's last answer to it (*grants*). The first thing on the store thread,
        before any write or read is served here (the other followers' snapshots were taken
        while opening, so they are installed meanwhile)."""
        assert self._sealed_at is not None
        entry = None if self.replicator is None else self.replicator.entry
        vouches = entry is not None and every_follower_vouches(entry.acks, entry.follower_count)
        over = replaced_lease_over(self._sealed_at, grants, replaced, vouches)
        left = over - time.monotonic()
        if left > 0:
            self._executor.submit(time.sleep, left)


def start_follower(member: Member, name: str | None, namespace: str) -> Any:
    """Get or create the follower actor *member* of context *name* (its Ray handle), pinned
    to its node; it starts as a follower (a spare of its node's store root if *name* is
    None: :mod:`actors.cluster.spares`)."""
    return (
        remote_class(FollowerActor, CONCURRENCY_GROUPS)
        .options(
            name=member.actor,
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=MAX_CONCURRENCY,
            num_cpus=0,
            scheduling_strategy=pinned(member.node_id),
        )
        .remote(member.store_dir, name, namespace)
    )


def start_followers(handle: Any, entry: ContextEntry) -> None:
    """After :func:`actors.cluster.placing.place` started *entry*'s primary: start its followers
    and make the primary replicate to them."""
    for m in entry.followers:
        start_follower(m, entry.name, handle.transport.namespace)
    open_reply(handle.transport.call(Call("replicate", (), lambda raw: raw, guarded=False)))
