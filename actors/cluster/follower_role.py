"""A replicated context's follower copy: the rules it serves by, over Ray calls.

:class:`FollowerRole` is what one follower of a context does with the calls it
gets: batches and catch-ups from the primary, the watermark, the supervisor's
fence and seal, snapshots, and reads at its applied state — only commits the
primary has acknowledged — each reply saying so (:class:`FollowerRead`) and each
checked as on the primary when the context enforces capabilities. Every control
message carries a MAC under the context's replication key, and every epoch the
directory's signature (:mod:`storage.replication.codec`): a caller without the key
changes nothing. :class:`FollowerHandle` is the blocking client of a follower's
status and reads. The Ray actor is :class:`actors.cluster.follower.FollowerActor`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from actors.client.joining import ray_module
from actors.client.names import DEFAULT_NAMESPACE, Member
from actors.client.replies import failed, ok, open_reply
from actors.client.transport import Call, Transport
from actors.cluster.liveness import Grants
from actors.server.guard import DEFAULT_PROJECT, DEFAULT_TENANT, OPERATION_OF, Guard
from protocol.errors import (
    FENCED,
    REPLICA_GAP,
    STALE_EPOCH,
    MorphzError,
    RequestError,
    StoreLocked,
    WireError,
)
from service.context import Context
from storage import LmdbStore, context_path
from storage.replication import Follower, install
from storage.replication.codec import MAX_DENIALS, check_control, replication_key, seal_denials
from storage.replication.epochs import check_epoch

log = logging.getLogger("morphz.replication")

LOCK_WAIT = 10.0
"""Seconds a starting follower waits for its store's writer lock."""
READS = frozenset(
    "frame state version snapshot read_event event history txlog meta frame_at"
    " read_for_update".split()
)
"""The reads a follower serves."""


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


def node_id() -> str:
    """This process's Ray node id (``""`` without Ray)."""
    ray = ray_module()
    return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""


def actor_name() -> str:
    """This Ray actor's name, ``""`` outside an actor (the member an epoch certificate
    must name for a ``seal`` or a promotion here)."""
    ray = ray_module()
    if not ray.is_initialized():
        return ""
    try:
        return str(ray.get_runtime_context().get_actor_name() or "")
    except Exception:  # not in an actor (a driver)
        return ""


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
        self._store_dir = store_dir
        self._checks: tuple[tuple[str | None, str | None, bool], Guard] | None = None
        self._path = str(context_path(store_dir, name))
        self._error: MorphzError | None = None
        self._store: LmdbStore | None = None
        self._reader: Context | None = None
        self._follower: Follower | None = None
        self._denials_lock = threading.Lock()
        self._denials: list[dict[str, Any]] = []
        """Reads denied here, not yet sent to the primary (:meth:`take_denials`)."""
        self._denials_over = 0
        self.grants = Grants()
        """When this copy last answered its primary as a follower (the promoted follower's
        wait for the replaced primary's lease:
        :func:`~actors.cluster.liveness.replaced_lease_over`)."""
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
            "node_id": node_id(),
            "epoch": f.state.epoch,
            "applied_seq": f.state.seq,
            "applied_version": f.state.version,
            "held_seq": f.held_seq,
            "head": f.head.hex(),
        }

    def _took(self, reply: Any) -> Any:
        """*reply*, having recorded that a message of the primary this copy is fenced at
        was taken and is answered now (:class:`~actors.cluster.liveness.Grants`)."""
        assert self._follower is not None
        self.grants.took(self._follower.state.epoch, time.monotonic())
        return reply

    def receive(self, data: bytes) -> bytes:
        """Hold batch *data* durably (apply what is acknowledged); the held sequence number."""
        try:
            return ok(self._took(self._live().receive(data)))
        except MorphzError as e:
            return failed(e)

    def catch_up(self, epoch: int, acked: int, batches: list[bytes], mac: bytes) -> bytes:
        """Hold the primary's retained batches after this follower's last one, at once
        (:meth:`storage.replication.Follower.catch_up`); the held sequence number."""
        try:
            return ok(self._took(self._live().catch_up(epoch, acked, batches, mac)))
        except MorphzError as e:
            return failed(e)

    def confirm(self, epoch: int, acked: int, mac: bytes) -> bytes:
        """The primary of *epoch* acknowledged batches up to *acked*: apply them (the
        message's MAC must check out)."""
        try:
            self._live().confirm_signed(epoch, acked, mac)
            return ok(None)
        except MorphzError as e:
            return failed(e)

    def status(self) -> bytes:
        """Epoch, applied and held batches, applied version, node (an answer a primary of
        that epoch counts toward its read lease: recorded in :attr:`grants`)."""
        try:
            status = self._status()
            self.grants.answered(int(status["epoch"]), time.monotonic())
            return ok(status)
        except MorphzError as e:
            return failed(e)

    def _signed(self, epoch: Any, cert: Any, *accept: str) -> int:
        """*epoch*, once *cert* is the directory's certificate of it for one of the purposes
        *accept* (a ``seal`` one naming this member); WireError ``bad_signature`` otherwise
        (:mod:`storage.replication.epochs`)."""
        member = actor_name() if accept == ("seal",) else None
        return check_epoch(self._name, epoch, cert, accept, member)

    def fence(self, epoch: int, cert: bytes) -> bytes:
        """Refuse batches of epochs before *epoch* (signed by the directory: *cert*) from
        now on; the status after."""
        try:
            self._live().fence(self._signed(epoch, cert, "fence", "epoch"))
            return ok(self._status())
        except MorphzError as e:
            return failed(e)

    def install(self, data: bytes, epoch: int, cert: bytes, mac: bytes) -> bytes:
        """Replace this copy by the primary's snapshot *data*, fenced at *epoch* (signed by
        the directory: *cert*; *mac*, the primary's MAC of the snapshot at that epoch)."""
        try:
            epoch = self._signed(epoch, cert, "epoch")
            key = self._live().key
            if not isinstance(data, bytes):
                raise WireError("a snapshot is bytes", code="bad_argument")
            check_control(key, mac, "install", epoch, hashlib.sha256(data).digest())
            if self._follower is not None and self._follower.state.epoch > epoch:
                # a replaced primary (restarted before it learnt so) may not overwrite us
                raise RequestError(
                    f"a snapshot from epoch {epoch} is older than this follower's "
                    f"{self._follower.state.epoch}",
                    code=STALE_EPOCH,
                )
            self._close()
            install(self._path, data)
            self._open()
            self._live().installed(epoch)
            return ok(self._took(self._status()))
        except MorphzError as e:
            return failed(e)

    def seal(self, epoch: int, cert: bytes) -> bytes:
        """Before promotion to *epoch* (*cert*: the directory's ``seal`` certificate naming
        this member): apply every held batch, fence at *epoch*, release the store."""
        try:
            self._live()
            return self.sealed_for(self._signed(epoch, cert, "seal"))
        except MorphzError as e:
            return failed(e)

    @property
    def sealed(self) -> bool:
        """True once this copy was sealed for promotion."""
        return self._follower is None and self._error is not None and self._error.code == FENCED

    def sealed_for(self, epoch: int) -> bytes:
        """:meth:`seal` at *epoch* already authorised (this process's promotion, which checked
        the directory's ``epoch`` certificate naming it); not a remote method."""
        try:
            f = self._live()
            f.drain()
            f.sealed(epoch)
            status = self._status()
            self._close()
            self._error = RequestError(
                f"follower of {self._name!r} was sealed for promotion", code=FENCED
            )
            return ok(status)
        except MorphzError as e:
            return failed(e)

    def _guard(self) -> Guard:
        """The capability check of this copy: the tenant, project and enforcement the
        context's meta records (its settings travel with every batch and snapshot)."""
        assert self._store is not None
        meta = self._store.read(lambda v: v.meta())
        settings = meta.settings if isinstance(meta.settings, dict) else {}
        key = (meta.tenant, meta.project, bool(settings.get("enforce")))
        if self._checks is None or self._checks[0] != key:
            guard = Guard(
                self._store_dir,
                self._name,
                tenant=meta.tenant or DEFAULT_TENANT,
                project=meta.project or DEFAULT_PROJECT,
                enforce=key[2],
            )
            self._checks = (key, guard)
        return self._checks[1]

    def _denied(self, entry: dict[str, Any]) -> None:
        """Keep a denial's audit *entry* for the primary (at most :data:`MAX_DENIALS`
        pending; more are counted into the last one)."""
        claimed = entry.get("claimed")
        with self._denials_lock:
            if len(self._denials) >= MAX_DENIALS:
                self._denials[-1]["count"] += 1
                self._denials_over += 1
                return
            self._denials.append({
                "method": str(entry.get("method")),
                "op": str(entry.get("op")),
                "holder": entry.get("holder"),
                "claimed": None if claimed is None else str(claimed),
                "why": str(entry.get("why")),
                "at": float(entry.get("time") or time.time()),
                "count": 1,
            })  # fmt: skip

    @property
    def pending_denials(self) -> int:
        """Denials held here for the primary's audit log."""
        return len(self._denials)

    def take_denials(self, follower: str, node: str) -> bytes | None:
        """The denials held here as one message for the primary's ``follower_denials``
        (:func:`storage.replication.codec.seal_denials`, MACed under the replication key),
        or None when there are none; they are no longer held."""
        with self._denials_lock:
            denials, self._denials = self._denials, []
        if not denials:
            return None
        key = self._follower.key if self._follower is not None else replication_key(self._name)
        return seal_denials(key, follower, node, denials)

    def read(self, method: str, args: list[Any], capability: Any = None) -> bytes:
        """Serve a read (:data:`READS`) at the applied state, saying so. A context that
        enforces capabilities is read here only with a token granting the read, as on its
        primary. A denial is logged, and kept for the context's audit log: a follower writes
        nothing to its own store (only its primary's batches change it), so its actor sends
        the denials to the primary (:meth:`take_denials`), which chains them into the log
        as its own (``served_by: "follower"``)."""
        try:
            if method not in READS:
                raise RequestError(f"a follower serves {sorted(READS)}, not {method!r}")
            f = self._live()
            if not f.holds_copy:
                raise RequestError(
                    f"this follower of {self._name!r} holds no copy of its primary's data yet "
                    "(its snapshot or first batch has not landed): read from the primary",
                    code=REPLICA_GAP,
                )
            refused = self._guard().check(OPERATION_OF.get(method, "read"), method, capability)
            if refused is not None:
                log.warning("context %r: follower read %s denied: %s",
                            self._name, method, refused[0].message)  # fmt: skip
                self._denied(refused[1])
                raise refused[0]
            if self._reader is None:
                self._reader = Context(LmdbStore.open(self._path, readonly=True), name=self._name)
            reply = getattr(self._reader, method)(*args)
            dump = getattr(reply, "model_dump", None)
            value = dump() if callable(dump) else reply
            read = FollowerRead(
                served_by="follower",
                node_id=node_id(),
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
    """A blocking handle of one follower: its status and the reads it serves (with
    *capability*, the token its reads carry when the context enforces them)."""

    def __init__(
        self,
        actor: Any,
        member: Member,
        namespace: str = DEFAULT_NAMESPACE,
        capability: bytes | None = None,
    ) -> None:
        self.member = member
        self.transport = Transport(
            actor, member.actor, label=member.actor, namespace=namespace, capability=capability
        )

    def status(self) -> dict[str, Any]:
        """Epoch, applied and held batches, applied version, node."""
        return dict(self.transport.call(Call("status", (), open_reply, guarded=False)))

    def read(self, method: str, *args: Any) -> FollowerRead:
        """Run the read *method* (:data:`READS`) on the follower's applied state."""
        if method not in READS:
            raise RequestError(f"a follower serves {sorted(READS)}, not {method!r}")
        raw = self.transport.call(Call("read", (method, list(args)), open_reply))
        return FollowerRead.model_validate(raw)


def follower_handle(
    member: Member, namespace: str = DEFAULT_NAMESPACE, capability: bytes | None = None
) -> FollowerHandle:
    """The handle of the running follower *member* (NotFound-free: Ray resolves it by name)."""
    actor = ray_module().get_actor(member.actor, namespace=namespace)
    return FollowerHandle(actor, member, namespace, capability)


__all__ = [
    "LOCK_WAIT",
    "READS",
    "FollowerHandle",
    "FollowerRead",
    "FollowerRole",
    "follower_handle",
]
