"""The context directory's caller side: :class:`DirectoryHandle`, the picklable handle every
port uses, and :func:`directory` / :func:`existing_directory`, which get (or create) the
directory actor of a namespace (:class:`actors.cluster.directory.DirectoryActor`, whose
module doc describes what the directory holds).

The handle sends arguments as given: the directory actor checks every one (any Ray
process can call it), and its typed errors come back as the same classes
(:func:`actors.client.replies.open_reply`). Ray is imported when a function runs, never
at import.
"""

from __future__ import annotations

import builtins
from typing import Any

from actors.client.joining import check_text
from actors.client.leader import directory_target
from actors.client.lookup import read_entry
from actors.client.names import (
    DEFAULT_NAMESPACE,
    DIRECTORY_NAME,
    ContextEntry,
    Member,
    member_of,
    members_of,
)
from actors.client.nodes import current_node_id, ensure_ray, preferring
from actors.client.replies import open_reply
from actors.client.transport import Call, RetryPolicy, Transport
from actors.cluster.directory import start_directory
from actors.cluster.placement import POLICY_SPREAD
from protocol.errors import RequestError

__all__ = ["DirectoryHandle", "directory", "existing_directory"]


def _entries(raw: Any) -> list[ContextEntry]:
    return [ContextEntry.model_validate(e) for e in open_reply(raw)]


def _roots(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in open_reply(raw).items()}


def _nothing(raw: Any) -> None:
    open_reply(raw)


class DirectoryHandle:
    """A picklable handle of the directory actor; every call blocks and raises typed errors.

    The directory checks the arguments; an unreachable directory is
    retried by the transport (Ray restarts it) and raises ``TransportError``
    after the retry policy.
    """

    def __init__(
        self,
        actor: Any,
        namespace: str = DEFAULT_NAMESPACE,
        retry: RetryPolicy | None = None,
        capability: bytes | None = None,
        actor_name: str = DIRECTORY_NAME,
    ) -> None:
        self.namespace = namespace
        self.transport = Transport(
            actor,
            actor_name,
            label=DIRECTORY_NAME,
            namespace=namespace,
            retry=retry,
            capability=capability,
        )

    def __repr__(self) -> str:
        return f"DirectoryHandle(namespace={self.namespace!r})"

    @property
    def actor(self) -> Any:
        """The Ray actor handle."""
        return self.transport.actor

    def require_admin(self, public_keys: builtins.list[str]) -> builtins.list[str]:
        """From now on every write to the directory needs an admin capability signed by one
        of *public_keys* (hex Ed25519 public keys, as ``morphz grant public-key`` prints);
        the key ids. Changing keys already set needs this handle's capability to be one."""
        keys = list(public_keys) if isinstance(public_keys, (list, tuple)) else public_keys
        return list(self.transport.call(Call("require_admin", (keys,), open_reply)))

    def ping(self) -> dict[str, Any]:
        """The directory's namespace and how many nodes and contexts it knows."""
        return dict(self.transport.call(Call("ping", (), open_reply, guarded=False)))

    def failovers(self) -> builtins.list[dict[str, Any]]:
        """The supervisor's recent promotions, newest last: why (``cause``: ``hung``,
        ``unreachable``, ``node lost``, ``raylet down``), how long the primary's pings had
        been missed (``silent_s``, for a hang), what the primary's node said of its process
        (``process``, for a hang: ``stopped``, ``gone``, ``unanswered``, ``no witness`` or
        ``busy`` past the grace; docs/cluster.md), and the seconds from the decision to the
        followers fenced (``fenced_s``), the replacement followers assigned or started
        (``recruited_s``; ``spares`` of the ``replacements`` were warm spares), the new
        entry recorded (``recorded_s``), the new primary serving (``serving_s``) and every
        replacement follower holding its snapshot (``replacement_serving_s``: None until
        then; a commit that needs a replacement's acknowledgement waits for it)."""
        return list(self.transport.call(Call("recent_failovers", (), open_reply, guarded=False)))

    def register_node(self, node_id: str, store_root: str) -> None:
        """Record that *node_id* keeps its stores under *store_root* (absolute, on that node)."""
        self.transport.call(Call("register_node", (node_id, store_root), _nothing))

    def node_roots(self) -> dict[str, str]:
        """Each node's store root: every live node (probed if not registered) and known ones."""
        return self.transport.call(Call("node_roots", (), _roots, guarded=False))

    def place(
        self,
        name: str,
        *,
        followers: int = 0,
        policy: str = POLICY_SPREAD,
        acks: int | None = None,
        store_dir: str | None = None,
    ) -> ContextEntry:
        """The entry of *name*, placing it if new (idempotent: an existing name answers its
        entry as it is). *policy*: ``"spread"``, ``"node:<id>"`` or ``"resource:<name>"``;
        *followers*: how many follower nodes, distinct from the primary's; *store_dir* (absolute)
        overrides the nodes' store roots for this context."""
        return self.transport.call(
            Call("place", (name, followers, policy, acks, store_dir), read_entry)
        )

    def place_hosted(self, name: str, *, policy: str = POLICY_SPREAD) -> ContextEntry:
        """The entry of *name*, placing it on a context host if new (idempotent): the
        host the hosts' load reports favour (:func:`~actors.cluster.placement.choose_host`);
        ``no_host`` when no live host has room."""
        return self.transport.call(Call("place_hosted", (name, policy), read_entry))

    def move_hosted(self, name: str, *, to: str | None = None) -> ContextEntry:
        """Move the hosted context *name* to the context host *to* (``host:<name>``; default:
        the least loaded other host of its node serving its store root); its handles
        follow. ``no_host`` / ``NotFound`` when there is no such host with room."""
        return self.transport.call(Call("move_hosted", (name, to), read_entry))

    def rebalance(self, *, limit: int = 100) -> dict[str, builtins.list[str]]:
        """Move up to *limit* idle contexts off full hosts (see
        :meth:`~actors.cluster.host_table.HostTable.rebalance`): the names moved by host."""
        return dict(self.transport.call(Call("rebalance", (limit,), open_reply)))

    def hosts(self) -> builtins.list[dict[str, Any]]:
        """The context hosts that reported their load recently, with ``placed`` counts."""
        return list(self.transport.call(Call("hosts", (), open_reply, guarded=False)))

    def get(self, name: str) -> ContextEntry:
        """The entry of *name*; NotFound if the directory has none."""
        return self.transport.call(Call("get", (name,), read_entry, guarded=False))

    def list(self) -> list[ContextEntry]:
        """Every entry, by name."""
        return self.transport.call(Call("list", (), _entries, guarded=False))

    def remove(self, name: str) -> None:
        """Forget *name*'s entry (actors and stores are left alone); NotFound if none."""
        self.transport.call(Call("remove", (name,), _nothing))

    def promote(
        self, name: str, *, expected_epoch: int, primary: Member, followers: builtins.list[Member]
    ) -> ContextEntry:
        """Store *primary* and *followers* at ``expected_epoch + 1`` if *name* is at
        *expected_epoch*; RequestError ``stale_epoch`` otherwise."""
        args = (
            name,
            expected_epoch,
            member_of(primary, "primary").model_dump(),
            [m.model_dump() for m in members_of(followers, "followers")],
        )
        return self.transport.call(Call("promote", args, read_entry))

    def set_primary(self, name: str, *, epoch: int, primary: Member) -> ContextEntry:
        """Record *primary* for the unreplicated context *name* if it is at *epoch* (kept);
        ``stale_epoch`` otherwise, ``bad_argument`` for a replicated context."""
        args = (name, epoch, member_of(primary, "primary").model_dump())
        return self.transport.call(Call("set_primary", args, read_entry))

    def set_followers(
        self, name: str, *, epoch: int, followers: builtins.list[Member]
    ) -> ContextEntry:
        """Store *followers* for *name* if it is at *epoch* (kept); ``stale_epoch`` otherwise."""
        args = (name, epoch, [m.model_dump() for m in members_of(followers, "followers")])
        return self.transport.call(Call("set_followers", args, read_entry))


def directory(
    namespace: str = DEFAULT_NAMESPACE,
    *,
    retry: RetryPolicy | None = None,
    capability: bytes | None = None,
) -> DirectoryHandle:
    """Get or create the directory of *namespace* (connecting to Ray if needed).

    *capability* is the admin token the handle's writes carry (needed once the directory
    has admin keys: :meth:`DirectoryHandle.require_admin`).

    The handle calls the directory leading the namespace (the one its signed lead record
    names: a standby that took over from a lost node's directory is that one). A new
    directory is detached, restarted by Ray without limit, and started on this process's
    node; it is not pinned there: when that node is lost, its standby on another node
    takes over, Ray restarts it on a live node later, and it reloads its state from the
    GCS (docs/cluster.md, "A standby directory").
    """
    check_text(namespace, "namespace")
    if not namespace:
        raise RequestError("namespace must not be empty", code="bad_argument")
    ensure_ray()
    target = directory_target(namespace)
    if target is not None:
        return DirectoryHandle(target[1], namespace, retry, capability, actor_name=target[0])
    actor = start_directory(DIRECTORY_NAME, namespace, preferring(current_node_id()))
    return DirectoryHandle(actor, namespace, retry, capability)


def existing_directory(namespace: str = DEFAULT_NAMESPACE) -> DirectoryHandle | None:
    """The directory of *namespace* if one was created, else None (never creates one)."""
    target = directory_target(namespace)
    if target is None:
        return None
    return DirectoryHandle(target[1], namespace, actor_name=target[0])
