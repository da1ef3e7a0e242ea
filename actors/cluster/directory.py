"""The context directory: where every context of a cluster lives, by name.

One detached Ray actor per namespace, ``morphz:directory``, started on the node
of the process that first creates it (the head node when a driver there asks
first) and restarted by Ray when its process dies (``max_restarts=-1``) — on
another live node when its own is lost (a soft node affinity). It holds two
tables:

* the **store root of each node** — registered with :meth:`DirectoryHandle.register_node`,
  else what a probe task pinned to that node sees in ``MORPHZ_STORE``, else
  ``~/.morphz`` on that node;
* one :class:`ContextEntry` per **placed context** — its epoch, replication
  factor, primary :class:`Member` and followers.

Its state lives in Ray's GCS internal key-value store
(``ray.experimental.internal_kv``, namespace ``morphz-directory/<namespace>``),
written before the in-memory table changes, so a restarted directory reloads
it in its constructor. Any process of the cluster can write that store, so every
value is kept with the directory's Ed25519 signature of it (its key, its namespace
and its value: :func:`protocol.epochs.sign_record`), and a record that does not verify on load — one
written before records were signed, or by another process — is refused: logged,
left out, and named in the error a call on it answers (``bad_signature``). Losing the
directory loses nothing a context holds: the stores are on the nodes, and a context
actor already running keeps serving; only placing, looking up by directory and
promotions wait until Ray has restarted it. Losing the GCS (the head node) loses the
Ray cluster itself.

The directory only records: it does not start context actors. ``actors.cluster.placing.place``
asks it where a context goes, then starts the primary there. Errors travel as
reply envelopes (``actors.client.replies``), never pickled. Ray is imported when a
function runs, never at import. See docs/cluster.md.

Kept as one module (over 600 lines) because the models, the actor and its
handle are one contract: each method's actor side and caller side sit together.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import logging
import os
from typing import Any

from pydantic import ValidationError

from actors.client.joining import check_int, check_text, ray_module, remote_class
from actors.client.lookup import directory_actor, read_entry
from actors.client.names import (
    DEFAULT_NAMESPACE,
    DIRECTORY_NAME,
    ContextEntry,
    Member,
    follower_actor,
    primary_actor,
)
from actors.client.nodes import (
    alive_nodes,
    check_node,
    current_node_id,
    ensure_ray,
    pinned,
    preferring,
)
from actors.client.replies import failed, ok, open_reply
from actors.client.transport import Call, RetryPolicy, Transport
from actors.cluster.directory_admin import (
    ADMIN_KEYS,
    ALL,
    OPERATOR,
    SUPERVISING,
    check_admin,
    env_admin_keys,
    parse_keys,
)
from actors.cluster.failover import watch
from actors.cluster.host_table import HostTable
from actors.cluster.placement import POLICY_SPREAD, check_policy, choose_nodes
from actors.cluster.replication import sign_epoch
from protocol import capabilities
from protocol.capabilities import PermissionDenied
from protocol.epochs import BAD_SIGNATURE, open_record, sign_record
from protocol.errors import STALE_EPOCH, MorphzError, NotFound, RequestError, StoreError
from storage import check_context_name
from storage.keys import DIRECTORY_PUBLIC_KEYS_ENV, directory_public_keys, directory_signing_key

log = logging.getLogger("morphz.directory")

KV_NAMESPACE = "morphz-directory/"
"""Prefix of the GCS internal-KV namespace holding a directory's state (+ the Ray namespace)."""
STORE_ENV = "MORPHZ_STORE"
"""The environment variable naming a node's store root (read on that node)."""
DEFAULT_ROOT = "~/.morphz"
"""A node's store root when nothing else names one (expanded on that node)."""
PROBE_TIMEOUT = 30.0
"""Seconds the directory waits for a probe task to report a node's store root."""

__all__ = [
    "DEFAULT_ROOT",
    "KV_NAMESPACE",
    "PROBE_TIMEOUT",
    "STORE_ENV",
    "DirectoryActor",
    "DirectoryHandle",
    "directory",
    "existing_directory",
    "signed",
]


def _probe_root() -> str:
    """This node's store root: ``MORPHZ_STORE`` if set, else ``~/.morphz`` (absolute)."""
    return os.path.abspath(os.path.expanduser(os.environ.get(STORE_ENV) or DEFAULT_ROOT))


def _members(value: object, what: str) -> tuple[Member, ...]:
    if not isinstance(value, (list, tuple)):
        raise RequestError(f"{what} must be a list of members", code="bad_argument")
    return tuple(_member(m, what) for m in value)


def _member(value: object, what: str) -> Member:
    if isinstance(value, Member):
        return value
    try:
        return Member.model_validate(value)
    except ValidationError as e:
        raise RequestError(f"bad {what}: {e.errors()[0].get('msg')}", code="bad_argument") from e


class DirectoryActor(HostTable):
    """The directory's actor class (plain; :func:`directory` runs it as a Ray actor).

    Every method answers a reply envelope (``actors.client.replies.ok`` / ``failed``).
    Changes are serialized by one lock and written to the GCS KV before the
    in-memory tables change, so a failed write changes nothing.
    """

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.namespace = namespace
        self.roots: dict[str, str] = {}
        self.entries: dict[str, ContextEntry] = {}
        self.stored_keys: dict[str, bytes] = {}
        """Admin keys set with ``require_admin`` (kept, signed, in the GCS)."""
        self.env_keys: dict[str, bytes] = {}
        """Admin keys of the directory's environment (:func:`env_admin_keys`)."""
        self._lock: asyncio.Lock | None = None
        self._watch: asyncio.Task[Any] | None = None
        self.refused: dict[str, str] = {}
        """Records of the GCS refused on load (``key`` -> why): not signed by this directory."""
        self.failovers: list[dict[str, Any]] = []
        """The supervisor's recent promotions, newest last (memory only: see
        :meth:`failovers`)."""
        self._load()
        try:
            self.env_keys = env_admin_keys()
        except MorphzError as e:  # malformed: closed until fixed, never silently open
            self.refused[ADMIN_KEYS] = f"the environment's admin keys: {e.message}"
            log.error("directory of %r: %s", namespace, self.refused[ADMIN_KEYS])
        if not self.admin_keys and ADMIN_KEYS not in self.refused:
            log.warning(
                "directory of %r is OPEN: it has no admin keys, so any process of the Ray"
                " cluster may place, promote, move or remove contexts; set"
                " MORPHZ_DIRECTORY_ADMIN_KEYS (or MORPHZ_GRANT_PUBLIC_KEYS) in the environment"
                " of `ray start` to close it (docs/security.md)",
                namespace,
            )

    @property
    def admin_keys(self) -> dict[str, bytes]:
        """The keys an admin capability must be signed with to change the directory (none:
        anyone may; :mod:`actors.cluster.directory_admin`)."""
        return {**self.env_keys, **self.stored_keys}

    # -- persistence -------------------------------------------------------------

    def _kv(self) -> Any:
        from ray.experimental import internal_kv

        return internal_kv

    def _load(self) -> None:
        kv, ns = self._kv(), KV_NAMESPACE + self.namespace
        own = capabilities.public_key(directory_signing_key())
        public = [own]
        if os.environ.get(DIRECTORY_PUBLIC_KEYS_ENV, "").strip():
            trusted = list(directory_public_keys().values())
            public += [k for k in trusted if k != own]  # records of an earlier key load too
            if own not in trusted:
                log.error(
                    "directory of %r signs with key %s, which %s does not name: members"
                    " will refuse its epochs",
                    self.namespace,
                    capabilities.key_id(own),
                    DIRECTORY_PUBLIC_KEYS_ENV,
                )
        for key in kv._internal_kv_list("", namespace=ns):
            raw = kv._internal_kv_get(key, namespace=ns)
            if raw is None:
                continue
            text = key.decode(errors="replace")
            kind, _, name = text.partition("/")
            try:
                value = open_record(public, self.namespace, text, raw)
                if kind == "node":
                    self.roots[name] = value
                elif kind == "ctx":
                    self.entries[name] = signed(ContextEntry.model_validate_json(value))
                elif text == ADMIN_KEYS:
                    self.stored_keys = parse_keys(value.split(","))
            except (MorphzError, ValidationError) as e:
                why = e.message if isinstance(e, MorphzError) else "not a valid entry"
                self.refused[text] = why
                log.error("directory of %r: record %r refused: %s", self.namespace, text, why)

    def _put(self, key: str, value: str) -> None:
        record = sign_record(directory_signing_key(), self.namespace, key, value)
        try:
            self._kv()._internal_kv_put(key, record, True, namespace=KV_NAMESPACE + self.namespace)
            self.refused.pop(key, None)
        except Exception as e:
            raise StoreError(f"directory: cannot write its state: {e}", code="directory_io") from e

    def _delete(self, key: str) -> None:
        try:
            self._kv()._internal_kv_del(key, namespace=KV_NAMESPACE + self.namespace)
            self.refused.pop(key, None)
        except Exception as e:
            raise StoreError(f"directory: cannot write its state: {e}", code="directory_io") from e

    def _save_entry(self, entry: ContextEntry) -> ContextEntry:
        entry = signed(entry)
        self._put("ctx/" + entry.name, entry.model_dump_json())
        self.entries[entry.name] = entry
        return entry

    # -- helpers -----------------------------------------------------------------

    def _guard(self) -> asyncio.Lock:
        self._ensure_watch()
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _ensure_watch(self) -> None:
        """Start the supervisor (:func:`actors.cluster.failover.watch`) on this event loop."""
        if self._watch is not None and not self._watch.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (the plain class in a test)
            return
        # The supervisor's writes need no capability: it runs where SUPERVISING is set.
        context = contextvars.copy_context()
        context.run(SUPERVISING.set, True)
        self._watch = loop.create_task(watch(self), context=context)

    def _admin(
        self,
        capability: Any,
        context: str,
        method: str,
        *,
        tenant: str | None = None,
        ops: tuple[str, ...] = ("admin",),
    ) -> capabilities.Capability | None:
        """Refuse *method* on *context* (owned by *tenant*; None: the operator's) without an
        admin capability, once the directory has admin keys
        (:func:`~actors.cluster.directory_admin.check_admin`); the verified capability."""
        if ADMIN_KEYS in self.refused and not SUPERVISING.get():
            raise PermissionDenied(
                f"the directory's {method} is refused: its admin-key record does not carry the"
                f" directory's signature ({self.refused[ADMIN_KEYS]}); it stays closed until"
                " an admin of the keys in MORPHZ_DIRECTORY_ADMIN_KEYS sets them again"
            )
        return check_admin(self.admin_keys, capability, context, method, tenant=tenant, ops=ops)

    def _placer(self, capability: Any, name: str, method: str) -> str | None:
        """Check a new placement of *name* (an admin of any tenant may place a new name in
        its own tenant); the tenant the entry is recorded for (None: the operator's)."""
        try:
            claimed: str | None = capabilities.decode(capability).tenant
        except MorphzError:
            claimed = None  # refused below if the directory has keys
        cap = self._admin(capability, name, method, tenant=claimed)
        return None if cap is None or cap.tenant == OPERATOR else cap.tenant

    def _entry(self, name: object) -> ContextEntry:
        name = check_context_name(name)
        entry = self.entries.get(name)
        if entry is None and "ctx/" + name in self.refused:
            raise RequestError(
                f"the directory refused its record of context {name!r} on load: "
                f"{self.refused['ctx/' + name]}; place it again (an admin may remove it first)",
                code=BAD_SIGNATURE,
            )
        if entry is None:
            raise NotFound(f"no context {name!r} in the directory of namespace {self.namespace!r}")
        return entry

    async def root_of(self, node_id: str) -> str:
        """*node_id*'s store root: registered, else probed on that node (and remembered)."""
        root = self.roots.get(node_id)
        if root is not None:
            return root
        probe = ray_module().remote(num_cpus=0, scheduling_strategy=pinned(node_id))(_probe_root)
        try:
            root = str(await asyncio.wait_for(probe.remote(), PROBE_TIMEOUT))
        except Exception as e:
            raise StoreError(
                f"cannot learn the store root of node {node_id}: {e}", code="node_unreachable"
            ) from e
        self._put("node/" + node_id, root)
        self.roots[node_id] = root
        return root

    # -- the API (envelopes) -----------------------------------------------------

    async def ping(self) -> bytes:
        """Whether the directory answers (its namespace and counts)."""
        self._ensure_watch()
        closed = bool(self.admin_keys) or ADMIN_KEYS in self.refused
        return ok(
            {
                "namespace": self.namespace,
                "nodes": len(self.roots),
                "contexts": len(self.entries),
                "admin": "closed" if closed else "open",
                "refused": sorted(self.refused),
            }
        )

    async def recent_failovers(self) -> bytes:
        """The supervisor's recent promotions (at most ``actors.cluster.failover.HISTORY``),
        newest last: each ``{"context", "epoch", "cause", "silent_s", "at", "fenced_s",
        "recorded_s", "serving_s", "replacements"}`` (``at`` on the wall clock, the others
        seconds from it). Memory only: a restarted directory starts with none."""
        self._ensure_watch()
        return ok(list(self.failovers))

    async def require_admin(self, keys: Any, capability: Any = None) -> bytes:
        """From now on, every write needs an admin capability signed by one of *keys* (hex
        Ed25519 public keys). Setting the first keys needs nothing (it only closes the
        directory); changing them needs an admin capability under the current ones."""
        try:
            async with self._guard():
                self._admin(capability, ALL, "require_admin")
                parsed = parse_keys(keys)
                if not parsed:
                    raise RequestError("at least one admin key", code="bad_argument")
                self._put(ADMIN_KEYS, ",".join(k.hex() for k in parsed.values()))
                self.stored_keys = parsed
                return ok(sorted(parsed))
        except MorphzError as e:
            return failed(e)

    async def register_node(self, node_id: str, store_root: str, capability: Any = None) -> bytes:
        """Record *node_id*'s store root (an absolute path on that node)."""
        try:
            async with self._guard():
                self._admin(capability, ALL, "register_node")
                check_text(node_id, "node id")
                check_text(store_root, "store root")
                if not node_id:
                    raise RequestError("a node id is a non-empty string", code="bad_argument")
                if not os.path.isabs(store_root):
                    raise RequestError(
                        f"a store root is an absolute path, not {store_root!r}", code="bad_argument"
                    )
                self._put("node/" + node_id, store_root)
                self.roots[node_id] = store_root
                return ok(None)
        except MorphzError as e:
            return failed(e)

    async def node_roots(self) -> bytes:
        """The store root of every live node (probing those not known yet) and known ones."""
        try:
            async with self._guard():
                for node in alive_nodes():
                    await self.root_of(node["node_id"])
                return ok(dict(sorted(self.roots.items())))
        except MorphzError as e:
            return failed(e)

    async def place(
        self,
        name: str,
        followers: int = 0,
        policy: str = POLICY_SPREAD,
        acks: int | None = None,
        store_dir: str | None = None,
        capability: Any = None,
    ) -> bytes:
        """The entry of *name*: the existing one, else a new one placed by *policy*."""
        try:
            async with self._guard():
                name = check_context_name(name)
                if name in self.entries:
                    return ok(self.entries[name].model_dump())
                tenant = self._placer(capability, name, "place")
                check_int(followers, "followers")
                policy = check_policy(policy)
                acks = followers if acks is None else check_int(acks, "acks")
                if acks > followers:
                    raise RequestError(
                        f"acks ({acks}) cannot exceed the followers ({followers})",
                        code="bad_argument",
                    )
                if store_dir is not None and not (
                    isinstance(store_dir, str) and os.path.isabs(store_dir)
                ):
                    raise RequestError("store_dir must be an absolute path", code="bad_argument")
                live = {n["node_id"]: n["resources"] for n in alive_nodes()}
                load: dict[str, int] = {}
                for entry in self.entries.values():
                    for m in (entry.primary, *entry.followers):
                        load[m.node_id] = load.get(m.node_id, 0) + 1
                nodes = choose_nodes(policy, followers, live, load)
                roots = [store_dir or await self.root_of(n) for n in nodes]
                entry = ContextEntry(
                    name=name,
                    epoch=0,
                    follower_count=followers,
                    acks=acks,
                    primary=Member(
                        node_id=nodes[0], actor=primary_actor(name, 0), store_dir=roots[0]
                    ),
                    followers=tuple(
                        Member(node_id=n, actor=follower_actor(name, k, 0), store_dir=r)
                        for k, (n, r) in enumerate(zip(nodes[1:], roots[1:], strict=True))
                    ),
                    policy=policy,
                    tenant=tenant,
                )
                return ok(self._save_entry(entry).model_dump())
        except MorphzError as e:
            return failed(e)

    async def get(self, name: str) -> bytes:
        """The entry of *name*; NotFound if the directory has none."""
        self._ensure_watch()
        try:
            return ok(self._entry(name).model_dump())
        except MorphzError as e:
            return failed(e)

    async def list(self) -> bytes:
        """Every entry, by name."""
        self._ensure_watch()
        return ok([self.entries[n].model_dump() for n in sorted(self.entries)])

    async def remove(self, name: str, capability: Any = None) -> bytes:
        """Forget *name*'s entry (its actors and stores are left alone); NotFound if none."""
        try:
            async with self._guard():
                name = check_context_name(name)
                if name not in self.entries and "ctx/" + name in self.refused:
                    self._admin(capability, name, "remove")  # a refused record may go
                    self._delete("ctx/" + name)
                    return ok(None)
                entry = self._entry(name)
                self._admin(capability, entry.name, "remove", tenant=entry.tenant)
                self._delete("ctx/" + entry.name)
                del self.entries[entry.name]
                return ok(None)
        except MorphzError as e:
            return failed(e)

    async def promote(
        self, name: str, expected_epoch: int, primary: Any, followers: Any, capability: Any = None
    ) -> bytes:
        """Compare-and-set: if *name* is at *expected_epoch*, store the new members at
        ``expected_epoch + 1``; else RequestError ``stale_epoch``."""
        try:
            async with self._guard():
                entry = self._entry(name)
                self._admin(capability, entry.name, "promote", tenant=entry.tenant)
                check_int(expected_epoch, "expected_epoch")
                new_primary = _member(primary, "primary")
                new_followers = _members(followers, "followers")
                _check_epoch(entry, expected_epoch)
                updated = entry.model_copy(
                    update={
                        "epoch": entry.epoch + 1,
                        "primary": new_primary,
                        "followers": new_followers,
                    }
                )
                return ok(self._save_entry(updated).model_dump())
        except MorphzError as e:
            return failed(e)

    async def set_primary(
        self, name: str, epoch: int, primary: Any, capability: Any = None
    ) -> bytes:
        """Compare-and-set the primary of the unreplicated context *name* at *epoch* (kept):
        its actor re-created on a node that came back with its store root. A replicated
        context's primary changes only by :meth:`promote` (``bad_argument``)."""
        try:
            async with self._guard():
                entry = self._entry(name)
                self._admin(capability, entry.name, "set_primary", tenant=entry.tenant)
                check_int(epoch, "epoch")
                new_primary = _member(primary, "primary")
                if entry.replicated:
                    raise RequestError(
                        f"context {entry.name!r} is replicated: its primary changes by promotion",
                        code="bad_argument",
                    )
                _check_epoch(entry, epoch)
                updated = entry.model_copy(update={"primary": new_primary})
                return ok(self._save_entry(updated).model_dump())
        except MorphzError as e:
            return failed(e)

    async def set_followers(
        self, name: str, epoch: int, followers: Any, capability: Any = None
    ) -> bytes:
        """Compare-and-set the followers of *name* at *epoch* (the epoch is kept)."""
        try:
            async with self._guard():
                entry = self._entry(name)
                self._admin(capability, entry.name, "set_followers", tenant=entry.tenant)
                check_int(epoch, "epoch")
                new_followers = _members(followers, "followers")
                _check_epoch(entry, epoch)
                updated = entry.model_copy(update={"followers": new_followers})
                return ok(self._save_entry(updated).model_dump())
        except MorphzError as e:
            return failed(e)


def signed(entry: ContextEntry) -> ContextEntry:
    """*entry* carrying the directory's certificate that its primary serves it at its epoch
    (:mod:`storage.replication.epochs`; made now if it carries none or another)."""
    cert = sign_epoch(entry.name, entry.epoch, "epoch", entry.primary.actor).hex()
    if entry.epoch_signature == cert:
        return entry
    return entry.model_copy(update={"epoch_signature": cert})


def _check_epoch(entry: ContextEntry, epoch: int) -> None:
    """A compare-and-set's guard: RequestError ``stale_epoch`` unless *entry* is at *epoch*."""
    if entry.epoch != epoch:
        raise RequestError(
            f"context {entry.name!r} is at epoch {entry.epoch}, not {epoch}", code=STALE_EPOCH
        )


def _entries(raw: Any) -> list[ContextEntry]:
    return [ContextEntry.model_validate(e) for e in open_reply(raw)]


def _roots(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in open_reply(raw).items()}


def _nothing(raw: Any) -> None:
    open_reply(raw)


class DirectoryHandle:
    """A picklable handle of the directory actor; every call blocks and raises typed errors.

    Arguments are checked before the remote call; an unreachable directory is
    retried by the transport (Ray restarts it) and raises ``TransportError``
    after the retry policy.
    """

    def __init__(
        self,
        actor: Any,
        namespace: str = DEFAULT_NAMESPACE,
        retry: RetryPolicy | None = None,
        capability: bytes | None = None,
    ) -> None:
        self.namespace = namespace
        self.transport = Transport(
            actor,
            DIRECTORY_NAME,
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
        parse_keys(public_keys)
        keys = list(public_keys)
        return list(self.transport.call(Call("require_admin", (keys,), open_reply)))

    def ping(self) -> dict[str, Any]:
        """The directory's namespace and how many nodes and contexts it knows."""
        return dict(self.transport.call(Call("ping", (), open_reply, guarded=False)))

    def failovers(self) -> builtins.list[dict[str, Any]]:
        """The supervisor's recent promotions, newest last: why (``cause``: ``hung``,
        ``unreachable``, ``node lost``, ``raylet down``), how long the primary's pings had
        been missed (``silent_s``, for a hang), and the seconds from the decision to the
        followers fenced, the new entry recorded and the new primary serving."""
        return list(self.transport.call(Call("recent_failovers", (), open_reply, guarded=False)))

    def register_node(self, node_id: str, store_root: str) -> None:
        """Record that *node_id* keeps its stores under *store_root* (absolute, on that node)."""
        check_node(node_id)
        if not isinstance(store_root, str) or not os.path.isabs(store_root):
            raise RequestError(
                f"a store root is an absolute path, not {store_root!r}", code="bad_argument"
            )
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
        check_context_name(name)
        check_int(followers, "followers")
        check_policy(policy)
        if acks is not None:
            check_int(acks, "acks")
        if store_dir is not None and not (isinstance(store_dir, str) and os.path.isabs(store_dir)):
            raise RequestError("store_dir must be an absolute path", code="bad_argument")
        return self.transport.call(
            Call("place", (name, followers, policy, acks, store_dir), read_entry)
        )

    def place_hosted(self, name: str, *, policy: str = POLICY_SPREAD) -> ContextEntry:
        """The entry of *name*, placing it on a context host if new (idempotent): the
        host the hosts' load reports favour (:func:`~actors.cluster.placement.choose_host`);
        ``no_host`` when no live host has room."""
        check_context_name(name)
        check_policy(policy)
        return self.transport.call(Call("place_hosted", (name, policy), read_entry))

    def move_hosted(self, name: str, *, to: str | None = None) -> ContextEntry:
        """Move the hosted context *name* to the context host *to* (``host:<name>``; default:
        the least loaded other host of its node serving its store root); its handles
        follow. ``no_host`` / ``NotFound`` when there is no such host with room."""
        check_context_name(name)
        if to is not None:
            check_text(to, "host actor")
        return self.transport.call(Call("move_hosted", (name, to), read_entry))

    def rebalance(self, *, limit: int = 100) -> dict[str, builtins.list[str]]:
        """Move up to *limit* idle contexts off full hosts (see
        :meth:`~actors.cluster.host_table.HostTable.rebalance`): the names moved by host."""
        check_int(limit, "limit")
        return dict(self.transport.call(Call("rebalance", (limit,), open_reply)))

    def hosts(self) -> builtins.list[dict[str, Any]]:
        """The context hosts that reported their load recently, with ``placed`` counts."""
        return list(self.transport.call(Call("hosts", (), open_reply, guarded=False)))

    def get(self, name: str) -> ContextEntry:
        """The entry of *name*; NotFound if the directory has none."""
        check_context_name(name)
        return self.transport.call(Call("get", (name,), read_entry, guarded=False))

    def list(self) -> list[ContextEntry]:
        """Every entry, by name."""
        return self.transport.call(Call("list", (), _entries, guarded=False))

    def remove(self, name: str) -> None:
        """Forget *name*'s entry (actors and stores are left alone); NotFound if none."""
        check_context_name(name)
        self.transport.call(Call("remove", (name,), _nothing))

    def promote(
        self, name: str, *, expected_epoch: int, primary: Member, followers: builtins.list[Member]
    ) -> ContextEntry:
        """Store *primary* and *followers* at ``expected_epoch + 1`` if *name* is at
        *expected_epoch*; RequestError ``stale_epoch`` otherwise."""
        check_context_name(name)
        check_int(expected_epoch, "expected_epoch")
        args = (
            name,
            expected_epoch,
            _member(primary, "primary").model_dump(),
            [m.model_dump() for m in _members(followers, "followers")],
        )
        return self.transport.call(Call("promote", args, read_entry))

    def set_primary(self, name: str, *, epoch: int, primary: Member) -> ContextEntry:
        """Record *primary* for the unreplicated context *name* if it is at *epoch* (kept);
        ``stale_epoch`` otherwise, ``bad_argument`` for a replicated context."""
        check_context_name(name)
        check_int(epoch, "epoch")
        args = (name, epoch, _member(primary, "primary").model_dump())
        return self.transport.call(Call("set_primary", args, read_entry))

    def set_followers(
        self, name: str, *, epoch: int, followers: builtins.list[Member]
    ) -> ContextEntry:
        """Store *followers* for *name* if it is at *epoch* (kept); ``stale_epoch`` otherwise."""
        check_context_name(name)
        check_int(epoch, "epoch")
        args = (name, epoch, [m.model_dump() for m in _members(followers, "followers")])
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

    A new directory is detached, restarted by Ray without limit, and started on this
    process's node; it is not pinned there: when that node is lost, Ray restarts it
    on a live node, and it reloads its state from the GCS.
    """
    check_text(namespace, "namespace")
    if not namespace:
        raise RequestError("namespace must not be empty", code="bad_argument")
    ensure_ray()
    actor = (
        remote_class(DirectoryActor)
        .options(
            name=DIRECTORY_NAME,
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=-1,
            max_concurrency=100,
            num_cpus=0,
            # A requirement that is not empty: Ray places an actor needing no resource at
            # all on a random node, whatever its soft node affinity says.
            memory=1,
            scheduling_strategy=preferring(current_node_id()),
        )
        .remote(namespace)
    )
    return DirectoryHandle(actor, namespace, retry, capability)


def existing_directory(namespace: str = DEFAULT_NAMESPACE) -> DirectoryHandle | None:
    """The directory of *namespace* if one was created, else None (never creates one)."""
    actor = directory_actor(namespace)
    return None if actor is None else DirectoryHandle(actor, namespace)
