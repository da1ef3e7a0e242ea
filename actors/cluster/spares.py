"""Warm spares: idle follower processes kept running on every node, so that a replacement
follower is an actor already running rather than a Ray worker still starting.

A promotion or a repair needs a new follower on a node holding no member of the
context. Starting its process (a Ray worker, Morphz's imports, the actor's constructor)
takes one to three seconds on a loaded machine, and with ``acks == followers`` the new
primary's first acknowledgement waits for that follower. The supervisor
(:mod:`actors.cluster.failover`) therefore keeps :data:`SPARES_PER_NODE` idle
:class:`~actors.cluster.follower.FollowerActor` processes on every live node whose store
root it knows, as long as the directory holds a replicated context (none otherwise: a
cluster without replication pays nothing), and kills them when the last one is gone.

A spare is named ``spare:<node id>:<random>`` and starts assigned to no context. A
replacement *claims* one of its node (:meth:`SparePool.claim`): the supervisor assigns
it to the context (:meth:`~actors.cluster.follower.FollowerActor.assign`, which opens its
store under the node's root) before the directory records it as a follower, and the
member's actor name is the spare's name from then on. The assignment is signed by the
supervisor with the directory's Ed25519 key (:func:`sign_assignment`, the record format of
:func:`protocol.epochs.sign_record` over the GCS namespace, the spare's name and the
assignment) and written to the GCS key-value store first (namespace
``morphz-spares/<namespace>``, key = the spare's name), so a spare that Ray restarts comes
back as that context's follower. A spare acts on an assignment only once it verifies under
the directory's public keys (:func:`open_assignment`): an unsigned one, a forged one, one
signed by another key or made for another spare is refused (logged; the spare stays idle).
The pool is
memory only: a restarted directory (or a standby that took over) finds its idle spares again
by their names (Ray's named actors) and their missing assignment, before its first claim.
Ray is imported only when a function runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from actors.client.joining import ray_module
from actors.client.names import Member
from actors.client.nodes import stop_named
from protocol.epochs import BAD_SIGNATURE, open_record, sign_record
from protocol.errors import RequestError

log = logging.getLogger("morphz.failover")

SPARES_PER_NODE = 1
"""Idle spares the supervisor keeps on every live node while replicated contexts exist, at
least (:func:`spares_wanted`: more where one node's loss needs more replacements)."""
MAX_SPARES_PER_NODE = 4
"""The most idle spares kept on one node."""
SPARE_PREFIX = "spare:"
"""The start of every spare's actor name: ``spare:<node id>:<random>``."""
KV_NAMESPACE = "morphz-spares/"
"""The GCS key-value namespace (+ the Ray namespace) of the spares' assignments."""
ASSIGN_TIMEOUT = 15.0
"""Seconds the supervisor waits for a spare to take its assignment (else it is stopped and a
new follower started): a bound for a hung spare, not a slow one. A spare's process runs
already; on a starved machine its assignment may take seconds, but a new follower's process
takes longer still (25 to 46 s at load 23, where a 3 s bound gave up on the spare and the
promoted primary's first commit waited for the new process past
:data:`~actors.cluster.replication.SHIP_TIMEOUT`: docs/cluster.md)."""
START_WAIT = 120.0
"""Seconds a new spare may take to answer (else it is stopped and replaced)."""
FIND_TRIES = 4
"""Searches for the spares already running (:meth:`SparePool.find`) one look makes at most
while Ray's named actors cannot be listed or a spare's assignment cannot be read."""
FIND_RETRY_WAIT = 0.5
"""Seconds between two of those searches."""

__all__ = [
    "ASSIGN_TIMEOUT",
    "FIND_RETRY_WAIT",
    "FIND_TRIES",
    "KV_NAMESPACE",
    "MAX_SPARES_PER_NODE",
    "SPARES_PER_NODE",
    "START_WAIT",
    "SPARE_PREFIX",
    "SparePool",
    "assignment_of",
    "assignment_record",
    "check_assignment",
    "is_spare",
    "open_assignment",
    "record_assignment",
    "sign_assignment",
    "spare_name",
    "spares_wanted",
]


def spares_wanted(members_by_node: dict[str, int]) -> int:
    """Idle spares to keep on every node, given how many members (primaries and followers)
    of replicated contexts each node holds: as many as one node's loss needs replacements
    — each member it held is replaced on another node — between :data:`SPARES_PER_NODE`
    and :data:`MAX_SPARES_PER_NODE`; 0 without any (no spare at all)."""
    most = max(members_by_node.values(), default=0)
    if most <= 0:
        return 0
    return min(MAX_SPARES_PER_NODE, max(SPARES_PER_NODE, most))


def spare_name(node_id: str) -> str:
    """A new spare's actor name on *node_id*."""
    return f"{SPARE_PREFIX}{node_id}:{uuid.uuid4().hex[:12]}"


def is_spare(actor: str) -> bool:
    """Whether *actor* is a spare's name (assigned or not)."""
    return actor.startswith(SPARE_PREFIX)


def _node_of(actor: str) -> str:
    return actor[len(SPARE_PREFIX) :].rpartition(":")[0]


def _kv() -> Any:
    from ray.experimental import internal_kv

    return internal_kv


def assignment_record(seed: bytes, namespace: str, actor: str, store_dir: str, name: str) -> bytes:
    """The record assigning spare *actor* of *namespace* to context *name* under *store_dir*,
    signed with the directory's signing key *seed* (:func:`protocol.epochs.sign_record`)."""
    doc = json.dumps({"store_dir": store_dir, "name": name}, sort_keys=True)
    return sign_record(seed, KV_NAMESPACE + namespace, actor, doc)


def open_assignment(public: list[bytes], namespace: str, actor: str, raw: bytes) -> tuple[str, str]:
    """``(store_dir, context name)`` of an assignment record of spare *actor* once it
    verifies under one of the directory's public keys *public*; RequestError
    ``bad_signature`` otherwise (unsigned, forged, another key's, another spare's or
    namespace's, malformed)."""
    value = open_record(public, KV_NAMESPACE + namespace, actor, bytes(raw)[:65536])
    try:
        doc = json.loads(value)
        store_dir, name = doc["store_dir"], doc["name"]
    except (ValueError, TypeError, KeyError) as e:
        raise RequestError(f"spare {actor!r}: malformed assignment", code=BAD_SIGNATURE) from e
    if not isinstance(store_dir, str) or not isinstance(name, str):
        raise RequestError(f"spare {actor!r}: malformed assignment", code=BAD_SIGNATURE)
    return store_dir, name


def sign_assignment(namespace: str, actor: str, store_dir: str, name: str) -> bytes:
    """:func:`assignment_record` under this node's directory signing key (the supervisor's,
    which runs in the directory process)."""
    from storage.keys import directory_signing_key

    return assignment_record(directory_signing_key(), namespace, actor, store_dir, name)


def check_assignment(namespace: str, actor: str, raw: bytes) -> tuple[str, str]:
    """:func:`open_assignment` under this node's directory public keys
    (:func:`storage.keys.directory_public_keys`): what a spare runs before acting."""
    from storage.keys import directory_public_keys

    return open_assignment(list(directory_public_keys().values()), namespace, actor, raw)


def record_assignment(namespace: str, actor: str, record: bytes) -> None:
    """Write the signed assignment *record* of spare *actor* (before it serves it)."""
    _kv()._internal_kv_put(actor.encode(), record, True, namespace=KV_NAMESPACE + namespace)


def assignment_of(namespace: str, actor: str) -> tuple[str, str] | None:
    """``(store_dir, context name)`` spare *actor* was assigned, or None: still idle, or its
    recorded assignment does not verify (refused and logged)."""
    raw = _kv()._internal_kv_get(actor.encode(), namespace=KV_NAMESPACE + namespace)
    if raw is None:
        return None
    try:
        return check_assignment(namespace, actor, raw)
    except RequestError as e:
        log.error("spare %s: assignment refused: %s", actor, e.message)
        return None


class SparePool:
    """The idle spares of one namespace's supervisor, by node (see the module doc)."""

    def __init__(self, namespace: str, start: Callable[[Member, None, str], Any]) -> None:
        self.namespace = namespace
        self._start_actor = start
        """Starts a follower actor (:func:`actors.cluster.follower.start_follower`)."""
        self.idle: dict[str, list[str]] = {}
        """Node id -> names of its idle spares (started, not claimed)."""
        self.ready: set[str] = set()
        """The idle spares that answered once (their process runs)."""
        self._finding: asyncio.Future[None] | None = None
        self._claimed: set[str] = set()
        """Spares claimed by this supervisor (a search again never takes one back)."""
        self._waits: set[asyncio.Task[None]] = set()
        self._tending: asyncio.Task[None] | None = None

    def tend(
        self, roots: dict[str, str], live: set[str], wanted: int, members: frozenset[str]
    ) -> None:
        """:meth:`keep` in the background, one pass at a time: no look of the supervisor
        (a promotion) ever waits for the pool."""
        if self._tending is not None and not self._tending.done():
            return
        keeping = self._keep_logged(dict(roots), set(live), wanted, members)
        self._tending = asyncio.create_task(keeping)

    async def _keep_logged(
        self, roots: dict[str, str], live: set[str], wanted: int, members: frozenset[str]
    ) -> None:
        try:
            await self.keep(roots, live, wanted, members)
        except Exception as e:  # spares only save time: a promotion starts followers anyway
            log.warning("spares not kept: %s", e)

    async def find(self, members: frozenset[str]) -> None:
        """Take back the idle spares a previous incarnation of the supervisor started, and
        stop the assigned ones that are not *members* (actor names the directory's entries
        record) (:meth:`_find`); every caller waits for the same search. A directory that
        just took over promotes at its first look, while its pool is still empty: a claim
        before this search would start a new process (tens of seconds on a starved
        machine) beside an idle spare of the node.

        The search is retried (:data:`FIND_TRIES`, :data:`FIND_RETRY_WAIT` apart) while
        Ray's named actors cannot be listed or a spare's assignment cannot be read, as
        when the GCS is slow just after a node was lost; if it still fails, the next
        call searches again (it used to search once: a failed search left the pool to
        new spares, and the takeover's promotion started a new follower beside a running
        spare)."""
        finding = self._finding
        if finding is None:
            finding = self._finding = asyncio.ensure_future(self._find_retried(members))
        try:
            await asyncio.shield(finding)
        except Exception as e:  # this claim starts a new follower; the next one looks again
            log.warning("the spares already running not all taken back: %s", e)
            if self._finding is finding:
                self._finding = None

    async def _find_retried(self, members: frozenset[str]) -> None:
        for attempt in range(FIND_TRIES):
            try:
                await asyncio.to_thread(self._find, members)
                return
            except Exception as e:
                if attempt + 1 == FIND_TRIES:
                    raise
                log.info("spares already running: search %d failed: %s", attempt + 1, e)
                await asyncio.sleep(FIND_RETRY_WAIT)

    def claim(self, node_id: str) -> str | None:
        """A ready idle spare of *node_id* (no longer idle from now), or None (one still
        starting saves nothing over a new follower)."""
        for name in self.idle.get(node_id, []):
            if name in self.ready:
                self.idle[node_id].remove(name)
                self.ready.discard(name)
                self._claimed.add(name)
                return name
        return None

    async def keep(
        self, roots: dict[str, str], live: set[str], wanted: int, members: frozenset[str]
    ) -> None:
        """Keep *wanted* idle spares (:func:`spares_wanted`) on every live node with a known
        store root in *roots*; kill every idle one when *wanted* is 0 (a node holding more,
        as *wanted* fell, keeps them until claimed). *members*: :meth:`find`."""
        await self.find(members)
        if not wanted:
            names = [name for names in self.idle.values() for name in names]
            self.idle.clear()
            self.ready.clear()
            for name in names:
                await asyncio.to_thread(stop_named, name, self.namespace)
            return
        for node in [n for n in self.idle if n not in live]:
            self.ready.difference_update(self.idle.pop(node))  # gone with its node
        for node in sorted(live):
            root = roots.get(node)
            if root is None:
                continue
            spares = self.idle.setdefault(node, [])
            while len(spares) < wanted:
                name = spare_name(node)
                member = Member(node_id=node, actor=name, store_dir=root)
                actor = await asyncio.to_thread(self._start_actor, member, None, self.namespace)
                spares.append(name)
                self._watch(name, actor)
                log.info("spare %s started", name)

    def _watch(self, name: str, actor: Any) -> None:
        """Mark spare *name* ready once it answers (dropped from the pool if it never does)."""

        async def wait() -> None:
            try:
                await asyncio.wait_for(actor.pid.remote(), START_WAIT)
            except Exception as e:
                log.warning("spare %s did not start: %s", name, e)
                for names in self.idle.values():
                    if name in names:
                        names.remove(name)
                        await asyncio.to_thread(stop_named, name, self.namespace)
                return
            if any(name in names for names in self.idle.values()):
                self.ready.add(name)

        task = asyncio.create_task(wait())
        self._waits.add(task)
        task.add_done_callback(self._waits.discard)

    def _find(self, members: frozenset[str]) -> None:
        """Take back the idle spares a previous incarnation of the supervisor started; stop
        an assigned spare that is not one of *members*: its assignment was never recorded
        (the directory that made it was lost between the two), and it holds its context's
        store on its node, which a follower started there later could never open.

        Idempotent (a spare already in the pool or claimed is skipped), so a failed search
        is retried whole; it raises once every spare it could read was handled if the list
        or a spare's assignment could not be read."""
        named = ray_module().util.list_named_actors(all_namespaces=True)
        known = {name for names in self.idle.values() for name in names} | self._claimed
        unknown: list[str] = []
        for item in named:
            name = str(item.get("name", ""))
            if item.get("namespace") != self.namespace or not is_spare(name) or name in known:
                continue
            try:
                if assignment_of(self.namespace, name) is None:
                    if name in self._claimed:  # claimed while this search ran
                        continue
                    self.idle.setdefault(_node_of(name), []).append(name)
                    self.ready.add(name)  # it was started before: a claim finds out
                elif name not in members:
                    log.warning("spare %s: assigned, but no entry records it: stopped", name)
                    _kv()._internal_kv_del(name.encode(), namespace=KV_NAMESPACE + self.namespace)
                    stop_named(name, self.namespace)
            except Exception as e:
                log.info("spare %s: assignment unknown: %s", name, e)
                unknown.append(name)
        if unknown:
            raise RuntimeError(f"assignments not read: {', '.join(unknown)}")

