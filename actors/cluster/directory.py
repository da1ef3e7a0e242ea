"""The context directory: where every context of a cluster lives, by name.

One detached Ray actor per namespace leads (``morphz:directory``, started near the
process that first creates it; :func:`start_directory`), restarted by Ray when its
process dies; a standby on another node takes over when the leader's node is lost
(:mod:`actors.cluster.leadership`). It holds two tables:

* the **store root of each node** — registered with
  :meth:`~actors.cluster.directory_handle.DirectoryHandle.register_node`,
  else ``MORPHZ_STORE`` as a process on that node sees it, else ``~/.morphz`` there
  (asked of a process already running there where one is, else of a task pinned there:
  :mod:`actors.cluster.roots`);
* one :class:`ContextEntry` per **placed context** — its epoch, replication
  factor, primary :class:`Member` and followers.

Its state lives in Ray's GCS key-value store (namespace ``morphz-directory/<namespace>``),
written before the in-memory table changes, so a restarted or standby directory reloads
it. Any process of the cluster can write that store, so every value is kept with the
directory's Ed25519 signature of it (:func:`protocol.epochs.sign_record`); a record that
does not verify on load is refused: logged, left out, and named in the error a call on it
answers (``bad_signature``). Losing the directory loses nothing a context holds: the
stores are on the nodes and running context actors keep serving.

The directory only records: ``actors.cluster.placing.place`` asks it where a context
goes, then starts the primary there. Errors travel as reply envelopes
(``actors.client.replies``), never pickled; Ray is imported when a function runs. This
module is the actor side; the caller side is :mod:`actors.cluster.directory_handle`.
See docs/cluster.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import uuid
from typing import Any

from pydantic import ValidationError

from actors.client.joining import check_int, check_text, remote_class
from actors.client.leader import DIRECTORY_KV
from actors.client.names import (
    DEFAULT_NAMESPACE,
    ContextEntry,
    Member,
    follower_actor,
    member_of,
    members_of,
    primary_actor,
)
from actors.client.nodes import (
    alive_nodes,
    check_node,
    pinned,
)
from actors.client.replies import failed, ok
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
from actors.cluster.leadership import (
    RESTART_AFTER,
    Leadership,
    is_lead_key,
    leading,
    whoami,
)
from actors.cluster.placement import POLICY_SPREAD, check_policy, choose_nodes
from actors.cluster.replication import sign_epoch
from actors.cluster.roots import DEFAULT_ROOT, STORE_ENV, learn_root, roots_for
from protocol import capabilities
from protocol.capabilities import PermissionDenied
from protocol.epochs import BAD_SIGNATURE, open_record, sign_record
from protocol.errors import (
    STALE_EPOCH,
    MorphzError,
    NotFound,
    RequestError,
    StoreError,
)
from storage import check_context_name
from storage.keys import DIRECTORY_PUBLIC_KEYS_ENV, directory_public_keys, directory_signing_key

log = logging.getLogger("morphz.directory")

KV_NAMESPACE = DIRECTORY_KV
"""Prefix of the GCS internal-KV namespace holding a directory's state (+ the Ray namespace)."""
PROBE_TIMEOUT = 120.0
"""Seconds a caller waits for a node's store root (:func:`~actors.cluster.roots.learn_root`;
it was 30 s, which a task waiting for a worker on a loaded node exceeded)."""

__all__ = [
    "DEFAULT_ROOT",
    "KV_NAMESPACE",
    "PROBE_TIMEOUT",
    "STORE_ENV",
    "DirectoryActor",
    "signed",
    "start_directory",
]


class DirectoryActor(HostTable, Leadership):
    """The directory's actor class (plain; :func:`actors.cluster.directory_handle.directory`
    runs it as a Ray actor).

    Every method answers a reply envelope (``actors.client.replies.ok`` / ``failed``).
    Changes are serialized by one lock and written to the GCS KV before the
    in-memory tables change, so a failed write changes nothing.
    """

    def __init__(self, namespace: str = DEFAULT_NAMESPACE, standby: bool = False) -> None:
        self.namespace = namespace
        self.actor_name, self.node_id = whoami()
        self.incarnation = uuid.uuid4().hex
        self.term: int | None = None
        """The leadership term this directory holds (:mod:`actors.cluster.leadership`);
        None: a standby (or deposed), which serves nothing."""
        self.led_at: float | None = None
        """When (wall clock) this directory claimed its term."""
        self.down: set[str] = set()
        """Nodes Ray still lists whose raylet was found down at the supervisor's last look
        (no placement goes there)."""
        self.standby: tuple[str, str] | None = None
        """The standby directory this leader keeps: ``(actor name, node id)``."""
        self.standby_started = -RESTART_AFTER  # (monotonic) when it last started one
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
        self._claim_at_start(standby)
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
            if is_lead_key(text):
                continue  # leadership, not a table (actors.cluster.leadership)
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
        self._check_term()
        record = sign_record(directory_signing_key(), self.namespace, key, value)
        try:
            self._kv()._internal_kv_put(key, record, True, namespace=KV_NAMESPACE + self.namespace)
            self.refused.pop(key, None)
        except Exception as e:
            raise StoreError(f"directory: cannot write its state: {e}", code="directory_io") from e

    def _delete(self, key: str) -> None:
        self._check_term()
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

    def start_standby(self, name: str, node: str) -> Any:
        """Start a standby directory named *name*, pinned to *node* (its Ray handle)."""
        return start_directory(name, self.namespace, pinned(node), standby=True)

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
        keys = self.admin_keys
        if ADMIN_KEYS in self.refused and not SUPERVISING.get():
            if not self.env_keys:
                raise PermissionDenied(
                    f"the directory's {method} is refused: its admin keys were refused"
                    f" ({self.refused[ADMIN_KEYS]}); it stays closed until an operator of the"
                    " keys in MORPHZ_DIRECTORY_ADMIN_KEYS sets them again (require_admin)"
                )
            keys = self.env_keys  # the GCS's record is not trusted: the environment's decides
        return check_admin(keys, capability, context, method, tenant=tenant, ops=ops)

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
        """*node_id*'s store root: registered, else learnt on that node and remembered
        (:func:`~actors.cluster.roots.learn_root`). StoreError ``node_unreachable`` when not
        learnt within :data:`PROBE_TIMEOUT` (the question goes on: a retry may find it)."""
        root = self.roots.get(node_id)
        if root is not None:
            return root
        try:
            return await asyncio.wait_for(asyncio.shield(learn_root(self, node_id)), PROBE_TIMEOUT)
        except TimeoutError as e:
            raise StoreError(
                f"cannot learn the store root of node {node_id} within {PROBE_TIMEOUT:.0f} s: no "
                "process of this cluster there answered and no Ray worker started there to ask "
                "(a loaded node starts one at a time); still asked: try again, or register the "
                "node's root",
                code="node_unreachable",
            ) from e
        except Exception as e:
            raise StoreError(
                f"cannot learn the store root of node {node_id}: {e}", code="node_unreachable"
            ) from e

    # -- the API (envelopes) -----------------------------------------------------

    async def ping(self) -> bytes:
        """Whether the directory answers (its namespace and counts)."""
        self._ensure_watch()
        closed = bool(self.admin_keys) or ADMIN_KEYS in self.refused
        return ok(
            {
                "namespace": self.namespace,
                "actor": self.actor_name,
                "node": self.node_id,
                "term": self.term,
                "leads": self.term is not None,
                "led_at": self.led_at,
                "standby": None if self.standby is None else self.standby[0],
                "nodes": len(self.roots),
                "contexts": len(self.entries),
                "admin": "closed" if closed else "open",
                "refused": sorted(self.refused),
            }
        )

    @leading
    async def recent_failovers(self) -> bytes:
        """The supervisor's recent promotions (at most ``actors.cluster.failover.HISTORY``),
        newest last, with their times (``DirectoryHandle.failovers`` lists the fields).
        Memory only: a restarted directory starts with none."""
        self._ensure_watch()
        return ok(list(self.failovers))

    @leading
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

    @leading
    async def register_node(self, node_id: str, store_root: str, capability: Any = None) -> bytes:
        """Record *node_id*'s store root (an absolute path on that node)."""
        try:
            async with self._guard():
                self._admin(capability, ALL, "register_node")
                check_node(node_id)  # a live node: NotFound otherwise
                check_text(store_root, "store root")
                if not os.path.isabs(store_root):
                    raise RequestError(
                        f"a store root is an absolute path, not {store_root!r}", code="bad_argument"
                    )
                self._put("node/" + node_id, store_root)
                self.roots[node_id] = store_root
                return ok(None)
        except MorphzError as e:
            return failed(e)

    @leading
    async def node_roots(self) -> bytes:
        """The store root of every live node (probing those not known yet) and known ones."""
        try:
            async with self._guard():
                for node in alive_nodes():
                    if node["node_id"] not in self.down:  # a probe there would hang
                        await self.root_of(node["node_id"])
                return ok(dict(sorted(self.roots.items())))
        except MorphzError as e:
            return failed(e)

    @leading
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
            if store_dir is None and check_context_name(name) not in self.entries:
                await roots_for(self, policy, followers)  # learnt before the lock is held
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
                live = {n["node_id"]: n["resources"] for n in alive_nodes()
                        if n["node_id"] not in self.down}  # fmt: skip
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

    @leading
    async def get(self, name: str) -> bytes:
        """The entry of *name*; NotFound if the directory has none."""
        self._ensure_watch()
        try:
            return ok(self._entry(name).model_dump())
        except MorphzError as e:
            return failed(e)

    @leading
    async def list(self) -> bytes:
        """Every entry, by name."""
        self._ensure_watch()
        return ok([self.entries[n].model_dump() for n in sorted(self.entries)])

    @leading
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

    @leading
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
                new_primary = member_of(primary, "primary")
                new_followers = members_of(followers, "followers")
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

    @leading
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
                new_primary = member_of(primary, "primary")
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

    @leading
    async def set_followers(
        self, name: str, epoch: int, followers: Any, capability: Any = None
    ) -> bytes:
        """Compare-and-set the followers of *name* at *epoch* (the epoch is kept)."""
        try:
            async with self._guard():
                entry = self._entry(name)
                self._admin(capability, entry.name, "set_followers", tenant=entry.tenant)
                check_int(epoch, "epoch")
                new_followers = members_of(followers, "followers")
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


def start_directory(name: str, namespace: str, strategy: Any, *, standby: bool = False) -> Any:
    """Start (or get) the directory actor *name* of *namespace*, placed by *strategy*: the
    one way a directory, leader or standby, is started; its Ray handle."""
    return (
        remote_class(DirectoryActor)
        .options(
            name=name,
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=-1,
            max_concurrency=100,
            num_cpus=0,
            memory=1,  # not empty: Ray places an actor needing nothing on any node
            scheduling_strategy=strategy,
        )
        .remote(namespace, standby)
    )
