"""Starting a context actor: :func:`connect` gets or creates the actor serving one
context's store, pinned to the node that holds it, and answers its
:class:`~actors.client.handle.ContextHandle`.

:func:`connect` starts nothing in the context directory, so single-node use needs
no cluster; it only asks a namespace's directory, when it has one, whether the
context is placed on a context host, and then reaches it there. With ``host=`` it
serves the context from that context host (:mod:`actors.server.hosting`,
started if it does not run). A context placed on a cluster
(:func:`actors.cluster.placing.place`) is started through this function too, with
the cluster's replication hook.
Arguments are checked before any remote call; a context that cannot be opened
raises the typed error of the failed open.
"""

from __future__ import annotations

import os
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.joining import check_int, check_text
from actors.client.lookup import directory_entry, lookup
from actors.client.names import (
    DEFAULT_NAMESPACE,
    ContextEntry,
    actor_name,
    host_actor,
    is_host,
)
from actors.client.nodes import check_lifetime, start_pinned
from actors.client.replies import raise_error
from actors.client.transport import RetryPolicy
from actors.server.context_actor import ContextActor
from actors.server.host import Replication
from actors.server.hosting import activate_hosted, start_host
from adapters.embeddings import EmbedderConfig
from protocol.errors import HOSTED_UNREPLICATED, NotFound, RequestError, TransportError
from protocol.governance import AdmissionPolicy, check_every, check_scan
from service.context import MAX_WINDOW
from storage import check_context_name
from storage.replication.recording import check_retain

MAX_CONCURRENCY = 1000
"""Calls one context actor's event loop accepts at once."""
LIVENESS_GROUP = "liveness"
"""A context actor's concurrency group for the supervisor's pings (``pid``): its own thread
and event loop, so a main event loop kept busy does not delay the answer."""
CONCURRENCY_GROUPS = {LIVENESS_GROUP: 1}
"""The concurrency groups of a context actor (besides Ray's default one)."""

__all__ = ["CONCURRENCY_GROUPS", "LIVENESS_GROUP", "MAX_CONCURRENCY", "connect"]


def connect(
    name: str,
    *,
    store_dir: str | os.PathLike[str],
    node_id: str | None = None,
    create: bool = True,
    namespace: str = DEFAULT_NAMESPACE,
    window: int | None = None,
    history_keep: int | None = None,
    lifetime: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    tenant: str | None = None,
    project: str | None = None,
    enforce: bool = False,
    capability: bytes | None = None,
    governance_every: float | None = None,
    governance_unused_ticks: int | None = None,
    admission: AdmissionPolicy | None = None,
    embedder: EmbedderConfig | None = None,
    replication: Replication | None = None,
    host: str | None = None,
    replication_log: int | None = None,
) -> ContextHandle:
    """Get or create the actor of context *name* and return its handle.

    The actor (``ctx:<name>`` in *namespace*) serves ``<store_dir>/<name>``,
    the same layout as ``morphz --store``. It is pinned to *node_id* (default:
    this node), the node whose disk holds the store; *store_dir* is a path on
    that node (made absolute here). ``lifetime="detached"`` lets the actor
    outlive the process that created it; otherwise it dies with its creator.
    If the actor already exists it is returned as it is, after checking it
    serves the same store directory (and the same node, when *node_id* is
    given). Raises the typed error of a failed open (``NotFound`` when
    ``create=False`` and the context does not exist, ``StoreLocked`` …).

    Governance (docs/permissions.md): the context belongs to *tenant* and
    *project* (stored on creation; naming others later raises ``RequestError``
    code ``scope_mismatch``). With ``enforce=True`` (sticky) every call must
    carry a capability: the handle sends *capability* with each call.
    *admission* is the actor's admission policy (default ``DefaultPolicy``);
    with *governance_every* seconds the actor runs admission and the quarantine
    scan unattended that often (*governance_unused_ticks* enables the
    ``unused`` rule). These three apply when the actor is created.

    *embedder* (an :class:`~adapters.embeddings.EmbedderConfig`; it names the
    API key's environment variable, read in the actor's process) makes the
    actor's search hybrid: it keeps a vector index beside the lexical one,
    embedding from a worker thread as commits land (docs/search.md). It too
    applies when the actor is created.

    *replication* is the hook a replicated context's primary reaches its
    followers through (:class:`~actors.server.host.Replication`): the cluster
    side (:func:`actors.cluster.placing.place`) gives it for the contexts it
    places; without it the actor serves its store alone, as on one node. It
    too applies when the actor is created. *replication_log* is how many of its last
    replicated batches the context keeps so a follower that fell behind catches up from
    them instead of a snapshot (recorded in the context's settings; default 4096).

    *host* serves the context from the context host of that name
    (:func:`~actors.server.hosting.start_host`: started on *node_id* for *store_dir*
    if it does not run, with its defaults) instead of an actor of its own: it is
    activated there now and again on demand after idle deactivations. A context
    the namespace's directory places on a host (``place(hosted=True)``) is
    reached on that host whether or not *host* is given (through
    :func:`~actors.client.lookup.lookup`, which activates it). Either way the
    handle works as any other. A hosted context has no replication
    (``hosted_unreplicated``), and its host must serve *store_dir* (``context_elsewhere``).
    """
    check_context_name(name)
    if not isinstance(store_dir, (str, os.PathLike)):
        raise RequestError("store_dir must be a path", code="bad_argument")
    where = os.path.abspath(os.fspath(store_dir))
    check_text(namespace, "namespace")
    if not namespace:
        raise RequestError("namespace must not be empty", code="bad_argument")
    if window is not None and not (
        isinstance(window, int) and not isinstance(window, bool) and 0 <= window <= MAX_WINDOW
    ):
        raise RequestError(f"window must be between 0 and {MAX_WINDOW} ticks", code="bad_argument")
    if history_keep is not None:
        check_int(history_keep, "history_keep", 1)
    check_lifetime(lifetime)
    if governance_every is not None:
        check_every(governance_every)
    check_scan(governance_unused_ticks, 3)
    if replication_log is not None:
        check_retain(replication_log)
    if embedder is not None and not isinstance(embedder, EmbedderConfig):
        raise RequestError("embedder must be an EmbedderConfig", code="bad_argument")
    if host is not None:
        check_context_name(host)  # the alphabet of an actor name's part
        if replication is not None:
            raise RequestError("a hosted context has no replication", code=HOSTED_UNREPLICATED)
    placed = None if replication is not None else _hosted_entry(name, namespace)
    if placed is not None or host is not None:
        options = {
            "window": window,
            "history_keep": history_keep,
            "tenant": tenant,
            "project": project,
            "enforce": bool(enforce) or None,
            "governance_every": governance_every,
            "governance_unused_ticks": governance_unused_ticks,
            "admission": admission,
            "embedder": embedder,
        }
        client = {"retry": retry, "timeout": timeout, "capability": capability}
        handle = _on_host(
            name, where, node_id, namespace, lifetime, create, host, placed, options, client
        )
        return _checked(handle, name, where, node_id, tenant, project, enforce)
    actor = start_pinned(
        ContextActor,
        name=actor_name(name),
        namespace=namespace,
        node_id=node_id,
        lifetime=lifetime,
        max_concurrency=MAX_CONCURRENCY,
        concurrency_groups=CONCURRENCY_GROUPS,
    ).remote(
        where,
        name,
        window,
        history_keep,
        create,
        tenant=tenant,
        project=project,
        enforce=bool(enforce),
        governance_every=governance_every,
        governance_unused_ticks=governance_unused_ticks,
        admission=admission,
        namespace=namespace,
        embedder=None if embedder is None else embedder.to_dict(),
        replication=replication,
        replication_log=replication_log,
    )
    handle = ContextHandle(
        actor, name, namespace=namespace, retry=retry, timeout=timeout, capability=capability
    )
    return _checked(handle, name, where, node_id, tenant, project, enforce)


def _checked(
    handle: ContextHandle,
    name: str,
    where: str,
    node_id: str | None,
    tenant: str | None,
    project: str | None,
    enforce: bool,
) -> ContextHandle:
    """*handle* once its handshake says it serves what was asked; the typed error of its
    failed open (a context alone in its own actor is stopped first), ``context_elsewhere``
    or ``scope_mismatch`` otherwise."""
    info = handle.handshake()
    if info["open_error"] is not None:
        if not is_host(handle.transport.actor_name):
            handle.shutdown()
        raise_error(info["open_error"])
    if info["store_dir"] != where:
        raise RequestError(
            f"context {name!r} is already served from {info['store_dir']}, not {where}",
            code="context_elsewhere",
        )
    if node_id is not None and info["node_id"] != node_id:
        raise RequestError(
            f"context {name!r} is already served on node {info['node_id']}, not {node_id}",
            code="context_elsewhere",
        )
    for field, want in (("tenant", tenant), ("project", project)):
        if want is not None and info[field] != want:
            raise RequestError(
                f"context {name!r} belongs to {field} {info[field]!r}, not {want!r}",
                code="scope_mismatch",
            )
    if enforce and not info["enforce"]:
        raise RequestError(
            f"context {name!r} is already served without enforcement", code="scope_mismatch"
        )
    return handle


def _hosted_entry(name: str, namespace: str) -> ContextEntry | None:
    """*name*'s entry in the namespace's context directory if it places it on a context
    host; None without a directory, entry or host (or when the directory is unreachable:
    then it is served as on one node)."""
    try:
        entry = directory_entry(name, namespace)
    except (NotFound, TransportError):
        return None
    return entry if entry is not None and is_host(entry.primary.actor) else None


def _on_host(
    name: str,
    where: str,
    node_id: str | None,
    namespace: str,
    lifetime: str | None,
    create: bool,
    host: str | None,
    placed: ContextEntry | None,
    options: dict[str, Any],
    client: dict[str, Any],
) -> ContextHandle:
    """The handle of *name* on its context host: the one the directory placed it on
    (*placed*; activated by :func:`lookup`), else the host *host* (started if needed)."""
    if placed is not None:
        if host is not None and placed.primary.actor != host_actor(host):
            raise RequestError(
                f"context {name!r} is placed on {placed.primary.actor}, not {host_actor(host)}",
                code="context_elsewhere",
            )
        return lookup(name, namespace, store_dir=where, **client)
    assert host is not None
    running = start_host(
        host, store_dir=where, node_id=node_id, namespace=namespace, lifetime=lifetime
    )
    serves = running.load()["store_dir"]
    if serves != where:
        raise RequestError(
            f"context host {host!r} serves {serves}, not {where}", code="context_elsewhere"
        )
    return activate_hosted(
        running.actor,
        host,
        name,
        namespace=namespace,
        options={"create": bool(create), **options},
        **client,
    )
