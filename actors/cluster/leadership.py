"""Leadership of a namespace's context directory: terms claimed create-only, a standby
that takes over when the leader's node is lost, a leader that steps down when a newer term
exists.

Ray restarts a directory whose node is lost only once its GCS declares that node dead
(5 missed health checks 3 s apart by default: 15 to 18 s), and its supervisor of
promotions restarts with it. So a namespace runs a **standby** as well: a directory actor
of the same class under another name (``morphz:directory~<random>``), started by the
leader on another live node (:func:`keep_standby`). It loads nothing and serves nothing
(every call but ``ping`` answers ``not_leader``); every :data:`WATCH_EVERY` seconds it
looks at the leader's node (:func:`stand_by`): when Ray's node table says it is dead, or
its raylet refuses connections or does not answer within a second — the check the
supervisor makes for a primary's node (:mod:`actors.cluster.failover`) — it **claims** the
next term.

A claim (:func:`claim`) is a create-only write (``overwrite=False``) of the lead record
``lead/<term>`` (:mod:`actors.client.leader`), signed with the directory's key: of two
directories claiming the same term, one wins. The winner reloads the tables from the GCS,
starts its supervisor and answers calls; callers find it through the lead record. The
directory it replaced, if it still runs (its node was cut off, not lost), **checks the term
before each write** (:func:`newer_term`): once a newer verified lead record exists it
writes nothing more, answers ``not_leader`` and becomes a standby itself. A restarted
incarnation of an actor never inherits its term: it claims a new one if its name led,
else it stands by.

What remains (docs/cluster.md): a write of the old leader that passed its term check just
before the claim can still land just after it (the window is one GCS round trip, longer
only if the old leader's process is paused in between).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from actors.client import nodes
from actors.client.joining import ray_module
from actors.client.leader import (
    DIRECTORY_KV,
    LEAD_PREFIX,
    Lead,
    lead_key,
    lead_terms,
    read_lead,
    read_leader,
)
from actors.client.names import DIRECTORY_NAME
from actors.client.replies import failed, open_reply
from protocol.epochs import sign_record
from protocol.errors import NOT_LEADER, RequestError

log = logging.getLogger("morphz.directory")

WATCH_EVERY = 0.5
"""Seconds between two looks of a standby at its leader's node."""
STANDBY_ENV = "MORPHZ_DIRECTORY_STANDBY"
"""``0`` in the directory's environment: run no standby (a directory whose signing key is
on one node only; its node's loss then waits for Ray's restart, as before)."""
RESTART_AFTER = 30.0
"""Seconds a leader waits after starting a standby before it starts another."""
SWEEP_EVERY = 30.0
"""Seconds between two looks of a leader for idle directories beyond its one standby."""
KEEP_TERMS = 8
"""Lead records kept below the current term (older ones are deleted by the leader)."""

__all__ = [
    "KEEP_TERMS",
    "Leadership",
    "RESTART_AFTER",
    "STANDBY_ENV",
    "SWEEP_EVERY",
    "WATCH_EVERY",
    "claim",
    "exists",
    "is_lead_key",
    "keep_standby",
    "leading",
    "newer_term",
    "raylet_down",
    "stand_by",
    "standby_name",
    "standbys_kept",
    "standby_wanted",
    "whoami",
]


def _kv() -> Any:
    from ray.experimental import internal_kv

    return internal_kv


def _seed() -> bytes:
    from storage.keys import directory_signing_key

    return directory_signing_key()


def _public() -> list[bytes]:
    """The keys a lead record verifies under: the trusted ones and this directory's own."""
    from protocol import capabilities
    from storage.keys import DIRECTORY_PUBLIC_KEYS_ENV, directory_public_keys

    own = capabilities.public_key(_seed())
    if not os.environ.get(DIRECTORY_PUBLIC_KEYS_ENV, "").strip():
        return [own]
    return list(directory_public_keys().values())


def whoami() -> tuple[str, str]:
    """This directory's actor name and node id (``morphz:directory`` and ``""`` for the
    plain class outside an actor)."""
    try:
        context = ray_module().get_runtime_context()
        return str(context.get_actor_name() or DIRECTORY_NAME), str(context.get_node_id() or "")
    except Exception:
        return DIRECTORY_NAME, ""


def standby_name() -> str:
    """A new standby directory's actor name."""
    return f"{DIRECTORY_NAME}~{uuid.uuid4().hex[:12]}"


def standby_wanted() -> bool:
    """Whether this directory keeps a standby (:data:`STANDBY_ENV` is not ``0``)."""
    return os.environ.get(STANDBY_ENV, "1").strip() != "0"


def claim(namespace: str, actor: str, node_id: str, incarnation: str) -> Lead | None:
    """Claim the term after the newest one of *namespace* for *actor* (on *node_id*, this
    *incarnation*): a create-only write of its signed lead record. The lead, or None if
    another directory wrote that term first."""
    terms = lead_terms(namespace)
    term = (terms[0] if terms else 0) + 1
    lead = Lead(term=term, actor=actor, node_id=node_id, incarnation=incarnation)
    key = lead_key(term)
    record = sign_record(_seed(), namespace, key, lead.model_dump_json())
    existed = _kv()._internal_kv_put(key, record, False, namespace=DIRECTORY_KV + namespace)
    if existed:
        return None
    for old in terms:  # the newest KEEP_TERMS stay for the record
        if old < term - KEEP_TERMS:
            _kv()._internal_kv_del(lead_key(old), namespace=DIRECTORY_KV + namespace)
    return lead


def newer_term(namespace: str, term: int) -> Lead | None:
    """The newest verified lead record of *namespace* past *term*, or None: what a leader
    checks before each write (one key listing; a record is read only past its term)."""
    public = _public()
    for t in lead_terms(namespace):
        if t <= term:
            return None
        lead = read_lead(namespace, t, public)
        if lead is not None:
            return lead
    return None


def raylet_down(node_id: str) -> bool:
    """True if Ray's node table says *node_id* is dead (or does not know it), or its raylet
    refuses connections or does not answer within :data:`~actors.client.nodes.RAYLET_TIMEOUT`."""
    for node in ray_module().nodes():
        if str(node.get("NodeID")) != node_id:
            continue
        if not node.get("Alive"):
            return True
        address, port = str(node.get("NodeManagerAddress", "")), int(node.get("NodeManagerPort", 0))
        return nodes.raylet_down(address, port)
    return True


async def stand_by(directory: Any) -> bool:
    """One look of a standby (or deposed) directory at its leader. It claims the next term
    when no directory leads, when the lead record names this actor (a previous incarnation:
    Ray restarted it), or when the leader's node is lost; it stops itself when the leader
    was stopped for good on a live node (``ray.kill``: the directory was stopped, and its
    standby with it). True if *directory* leads now."""
    ns = directory.namespace
    lead = await asyncio.to_thread(read_leader, ns, _public())
    if lead is not None and lead.actor != directory.actor_name:
        if not await asyncio.to_thread(raylet_down, lead.node_id):
            if not await asyncio.to_thread(_exists, lead.actor, ns):
                log.info("directory %s of %r: its leader %s was stopped: stopping too",
                         directory.actor_name, ns, lead.actor)  # fmt: skip
                await asyncio.to_thread(nodes.stop_named, directory.actor_name, ns)
            return False
        log.warning(
            "directory %s of %r: the leader %s (term %d) is on node %s, which is down:"
            " taking over",
            directory.actor_name,
            ns,
            lead.actor,
            lead.term,
            lead.node_id,
        )
    elif lead is not None and lead.incarnation == directory.incarnation:
        return False  # our own term (not taken by the look that claimed it)
    won = await asyncio.to_thread(
        claim, ns, directory.actor_name, directory.node_id, directory.incarnation
    )
    if won is None:
        return False  # another directory claimed it first: it leads, this one stands by
    directory.lead_with(won, down=set() if lead is None else {lead.node_id})
    return True


def standbys_kept(
    current: str | None, idle: dict[str, str], others: set[str]
) -> tuple[tuple[str, str] | None, list[str]]:
    """Of the idle directories *idle* (actor name -> node) beside a leader, the one it keeps
    as its standby and the ones it stops: it keeps *current* (the standby it started or
    adopted) if it is idle on one of the nodes *others* (live, not the leader's), else the
    first idle one there by node and name; every other idle directory is stopped (after a
    takeover, Ray's restart of the lost directory stands by beside the standby the new
    leader started). ``((name, node) or None, names to stop)``."""
    fit = sorted((node, name) for name, node in idle.items() if node in others)
    kept = next(((n, name) for n, name in fit if name == current), fit[0] if fit else None)
    stop = sorted(name for name in idle if kept is None or name != kept[1])
    return (None if kept is None else (kept[1], kept[0])), stop


async def keep_standby(directory: Any, live: set[str]) -> None:
    """Keep one standby directory on a live node other than the leader's, while there is
    one: start it (pinned to that node) if the one started before is gone or its node is;
    every :data:`SWEEP_EVERY` seconds, stop the idle directories beyond it
    (:func:`standbys_kept`)."""
    if not standby_wanted():
        return
    others = sorted(live - {directory.node_id} - directory.down)
    if time.monotonic() - directory.standby_swept >= SWEEP_EVERY:
        directory.standby_swept = time.monotonic()
        await asyncio.to_thread(_sweep, directory, set(others))
    current = directory.standby
    if current is not None and current[1] in others:
        if await asyncio.to_thread(_poke, current[0], directory.namespace):
            return
    if current is not None:
        await asyncio.to_thread(nodes.stop_named, current[0], directory.namespace)
        directory.standby = None
    if not others or time.monotonic() - directory.standby_started < RESTART_AFTER:
        return  # (a standby that cannot start, e.g. without the key there, is not churned)
    found = await asyncio.to_thread(_find_standby, directory, set(others))
    if found is not None:
        directory.standby = found
        return
    node, name = others[0], standby_name()
    directory.standby_started = time.monotonic()
    actor = await asyncio.to_thread(directory.start_standby, name, node)
    actor.ping.remote()  # its watch starts with its first call
    directory.standby = (name, node)
    log.info("directory of %r: standby %s started on node %s", directory.namespace, name, node)


def _sweep(directory: Any, others: set[str]) -> None:
    """Stop the idle directories of the namespace beyond the one standby kept (none while
    this directory does not lead: a newer term's leader keeps its own)."""
    current = None if directory.standby is None else directory.standby[0]
    kept, stop = standbys_kept(current, _idle_directories(directory), others)
    if not stop or not directory.still_leads():
        return
    for name in stop:
        log.warning("directory of %r: idle directory %s stopped (standby kept: %s)",
                    directory.namespace, name, None if kept is None else kept[0])  # fmt: skip
        nodes.stop_named(name, directory.namespace)
    if kept is not None:
        directory.standby = kept


def _poke(name: str, namespace: str) -> bool:
    """Whether the standby *name* runs; it is pinged (its watch starts with its first call:
    a standby restarted by Ray gets one this way)."""
    try:
        ray_module().get_actor(name, namespace=namespace).ping.remote()
    except ValueError:
        return False
    return True


def exists(name: str, namespace: str) -> bool:
    """Whether Ray holds an actor named *name* in *namespace* (alive or restarting)."""
    return _exists(name, namespace)


def _exists(name: str, namespace: str) -> bool:
    try:
        ray_module().get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True



def _find_standby(directory: Any, nodes: set[str]) -> tuple[str, str] | None:
    """A standby already running on one of *nodes* (a directory restarted by Ray, or one a
    previous leader started), found by name: ``(name, node)``."""
    return standbys_kept(None, _idle_directories(directory), nodes)[0]


def _idle_directories(directory: Any) -> dict[str, str]:
    """The directories of the namespace other than *directory* that answer a ping and do
    not lead (or hold a term older than this leader's: they step down at their next
    check): actor name -> node."""
    ray = ray_module()
    try:
        named = ray.util.list_named_actors(all_namespaces=True)
    except Exception:
        return {}
    idle = {}
    for item in named:
        name = str(item.get("name", ""))
        if item.get("namespace") != directory.namespace or name == directory.actor_name:
            continue
        if name != DIRECTORY_NAME and not name.startswith(DIRECTORY_NAME + "~"):
            continue
        try:
            actor = ray.get_actor(name, namespace=directory.namespace)
            status = open_reply(ray.get(actor.ping.remote(), timeout=2))
        except Exception:
            continue
        term, ours = status["term"], directory.term
        if term is None or (ours is not None and isinstance(term, int) and term < ours):
            idle[name] = str(status["node"])
    return idle


def is_lead_key(key: str) -> bool:
    """Whether *key* of the directory's KV namespace is a lead record (not a table record:
    the tables' loading skips them)."""
    return key.startswith(LEAD_PREFIX)


F = TypeVar("F", bound=Callable[..., Awaitable[bytes]])


def leading(method: F) -> F:
    """A directory API method that only the leading directory answers: a standby (or a
    deposed leader) answers ``not_leader`` (an envelope) and its caller asks the leader."""

    @functools.wraps(method)
    async def only_leader(self: Any, *args: Any, **kwargs: Any) -> bytes:
        if self.term is None:
            return failed(
                RequestError(
                    f"directory {self.actor_name} of {self.namespace!r} does not lead it",
                    code=NOT_LEADER,
                )
            )
        return await method(self, *args, **kwargs)

    return cast(F, only_leader)


class Leadership:
    """The leadership side of :class:`~actors.cluster.directory.DirectoryActor` (a mixin:
    the directory provides ``namespace``, ``actor_name``, ``node_id``, ``incarnation``,
    ``term``, ``down`` and its tables with ``_load``)."""

    namespace: str
    actor_name: str
    node_id: str
    incarnation: str
    term: int | None
    down: set[str]
    led_at: float | None
    standby: tuple[str, str] | None
    standby_started: float
    standby_swept: float = -SWEEP_EVERY
    """(monotonic) When this leader last stopped idle directories beyond its standby."""
    roots: dict[str, str]
    entries: dict[str, Any]
    refused: dict[str, str]
    stored_keys: dict[str, bytes]

    if TYPE_CHECKING:

        def _load(self) -> None: ...

    def _claim_at_start(self, standby: bool) -> None:
        """Lead from the start when no directory leads the namespace, when the one that
        led had this actor's name (this is its restart: a new incarnation claims a new
        term, never inherits one), or — unless this is a *standby* — when the one that led
        was stopped for good; else stand by."""
        lead = read_leader(self.namespace, _public())
        if lead is not None and lead.actor != self.actor_name and (
            standby or exists(lead.actor, self.namespace)
        ):
            log.info("directory %s of %r stands by (%s leads, term %d)",
                     self.actor_name, self.namespace, lead.actor, lead.term)  # fmt: skip
            return
        won = claim(self.namespace, self.actor_name, self.node_id, self.incarnation)
        if won is not None:
            self.term, self.led_at = won.term, time.time()
            log.info("directory %s of %r leads (term %d)",
                     self.actor_name, self.namespace, won.term)  # fmt: skip

    def lead_with(self, lead: Lead, *, down: set[str]) -> None:
        """Lead under *lead* (a term this directory just claimed): the tables are loaded
        again from the GCS (the previous leader wrote them); *down* are nodes found down."""
        self.roots, self.entries, self.refused, self.stored_keys = {}, {}, {}, {}
        self._load()
        self.down = set(down)
        self.led_at = time.time()
        self.term = lead.term
        log.warning("directory %s of %r leads (term %d)", self.actor_name, self.namespace,
                    lead.term)  # fmt: skip

    def still_leads(self) -> bool:
        """Whether this directory leads and no newer term exists (else it steps down)."""
        if self.term is None:
            return False
        newer = newer_term(self.namespace, self.term)
        if newer is None:
            return True
        log.error(
            "directory %s of %r: term %d was taken over by %s (term %d): it writes nothing"
            " more and stands by",
            self.actor_name,
            self.namespace,
            self.term,
            newer.actor,
            newer.term,
        )
        self.term = None
        return False

    def _check_term(self) -> None:
        """Before each write: NOT_LEADER unless this directory leads and no newer term
        exists (a write that passed this check just before a takeover can still land just
        after it: the race docs/cluster.md states)."""
        if not self.still_leads():
            raise RequestError(
                f"directory {self.actor_name} of {self.namespace!r} does not lead it",
                code=NOT_LEADER,
            )
