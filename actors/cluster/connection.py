"""Finding a context actor: :func:`connect` (get or create it, pinned to its store's
node), :func:`place` (the same, on the node the context directory chooses) and
:func:`lookup` (find a running one by name), each answering a
:class:`~actors.client.handle.ContextHandle`; :func:`advertised` reads where the actor
holding a store says it runs (the file it writes into the context's directory).

The directory (``actors.cluster.directory``) is created only by :func:`place` (or
``morphz contexts --cluster`` / ``morphz loadtest``); :func:`connect` never
touches it, so single-node use is as before. :func:`lookup` asks the directory
when one exists and it has an entry for the name (the primary may have been
promoted under another actor name), else finds ``ctx:<name>`` as before.

Arguments are checked before any remote call; a context that cannot be opened
raises the typed error of the failed open.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.replies import raise_error
from actors.client.transport import (
    DEFAULT_NAMESPACE,
    RetryPolicy,
    check_int,
    check_text,
    ray_module,
    remote_class,
)
from actors.cluster.directory import directory, existing_directory
from actors.cluster.placement import (
    POLICY_SPREAD,
    actor_name,
    check_node,
    check_policy,
    current_node_id,
    ensure_ray,
    pinned,
)
from actors.server.context_actor import ContextActor
from actors.server.host import ADVERT_FORMAT, advert_path
from adapters.embeddings import EmbedderConfig
from protocol.errors import NotFound, RequestError, TransportError
from protocol.governance import AdmissionPolicy, check_every, check_scan
from service.context import MAX_WINDOW
from storage import check_context_name

MAX_CONCURRENCY = 1000
"""Calls one context actor's event loop accepts at once."""

MAX_ADVERT_BYTES = 4096
"""Larger advert files are not adverts."""

__all__ = ["MAX_ADVERT_BYTES", "MAX_CONCURRENCY", "advertised", "connect", "lookup", "place"]


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
    if lifetime not in (None, "detached"):
        raise RequestError("lifetime is None or 'detached'", code="bad_argument")
    if governance_every is not None:
        check_every(governance_every)
    check_scan(governance_unused_ticks, 3)
    if embedder is not None and not isinstance(embedder, EmbedderConfig):
        raise RequestError("embedder must be an EmbedderConfig", code="bad_argument")
    ensure_ray()
    node = check_node(node_id) if node_id is not None else current_node_id()
    actor = (
        remote_class(ContextActor)
        .options(
            name=actor_name(name),
            namespace=namespace,
            get_if_exists=True,
            lifetime=lifetime,
            max_restarts=-1,
            max_task_retries=-1,
            max_concurrency=MAX_CONCURRENCY,
            num_cpus=0,
            scheduling_strategy=pinned(node),
        )
        .remote(
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
        )
    )
    handle = ContextHandle(
        actor, name, namespace=namespace, retry=retry, timeout=timeout, capability=capability
    )
    info = handle.handshake()
    if info["open_error"] is not None:
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


def place(
    name: str,
    *,
    replicas: int = 0,
    placement: str = POLICY_SPREAD,
    acks: int | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    lifetime: str | None = "detached",
    create: bool = True,
    **options: Any,
) -> ContextHandle:
    """Get or create context *name* on the node the context directory chooses.

    *placement*: ``"spread"`` (the live node holding the fewest context members,
    ties to the smallest node id), ``"node:<id>"`` (that node) or
    ``"resource:<name>"`` (the least-loaded live node offering that custom
    resource). The store goes under the chosen node's store root (registered
    with the directory, else ``MORPHZ_STORE`` on that node, else ``~/.morphz``
    there), or under *store_dir* (absolute, a path on that node) if given.
    *replicas* follower nodes are chosen too (all distinct); *acks* is how many
    must hold a commit before it is acknowledged (default *replicas*).

    Idempotent: a context already in the directory is found where it is (its
    current primary), whatever the arguments. The actor is detached by default
    (the directory's entry outlives this process; stop it with
    ``handle.shutdown()`` and forget it with ``directory().remove(name)``).
    Other *options* are :func:`connect`'s (window, tenant, enforce …). Errors
    are typed and change nothing: ``bad_placement``, ``not_found`` (unknown
    node or resource), ``not_enough_nodes``, ``bad_context_name`` …
    """
    check_context_name(name)
    check_policy(placement)
    if "node_id" in options:
        raise RequestError("place chooses the node: use placement='node:<id>'", code="bad_argument")
    check_int(replicas, "replicas")
    if acks is not None:
        check_int(acks, "acks")
    if store_dir is not None and not isinstance(store_dir, (str, os.PathLike)):
        raise RequestError("store_dir must be a path", code="bad_argument")
    root = None if store_dir is None else os.path.abspath(os.fspath(store_dir))
    if lifetime not in (None, "detached"):
        raise RequestError("lifetime is None or 'detached'", code="bad_argument")
    check_text(namespace, "namespace")
    if not namespace:
        raise RequestError("namespace must not be empty", code="bad_argument")
    replica = _replication() if replicas else None  # refused before anything is recorded
    entry = directory(namespace).place(
        name, replicas=replicas, policy=placement, acks=acks, store_dir=root
    )
    if entry.epoch > 0:  # promoted since: the replicas' side runs it
        return lookup(name, namespace, retry=options.get("retry"), timeout=options.get("timeout"))
    handle = connect(
        name,
        store_dir=entry.primary.store_dir,
        node_id=entry.primary.node_id,
        namespace=namespace,
        lifetime=lifetime,
        create=create,
        **options,
    )
    if entry.followers:
        (replica or _replication()).start_followers(handle, entry)
    return handle


def _replication() -> Any:
    """The replication module (``actors.cluster.member``); ``replication_unavailable``
    without it."""
    try:
        return importlib.import_module("actors.cluster.member")
    except ImportError as e:
        raise RequestError(
            "this installation cannot replicate contexts", code="replication_unavailable"
        ) from e


def lookup(
    name: str,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    capability: bytes | None = None,
    store_dir: str | os.PathLike[str] | None = None,
) -> ContextHandle:
    """The handle of the running context actor *name*, from anywhere in the cluster.

    When the namespace has a context directory with an entry for *name*, the
    handle is its current primary's actor; otherwise ``ctx:<name>``.
    Raises :class:`NotFound` if no such actor exists in *namespace*. With
    *store_dir*, the actor must serve ``<store_dir>/<name>`` (checked by a
    handshake): another store's context of the same name raises
    ``RequestError`` ``context_elsewhere``, an actor whose open failed raises
    that failure.
    """
    check_context_name(name)
    check_text(namespace, "namespace")
    if store_dir is not None and not isinstance(store_dir, (str, os.PathLike)):
        raise RequestError("store_dir must be a path", code="bad_argument")
    ensure_ray()
    ray_name = actor_name(name)
    known = existing_directory(namespace)
    if known is not None:
        try:
            ray_name = known.get(name).primary.actor
        except NotFound:
            pass  # not placed through the directory: the single-node name
        except TransportError:
            pass  # the directory is unreachable: the epoch-0 name, as without one
    try:
        actor = ray_module().get_actor(ray_name, namespace=namespace)
    except ValueError as e:
        raise NotFound(f"no context actor {name!r} in namespace {namespace!r}") from e
    handle = ContextHandle(
        actor,
        name,
        namespace=namespace,
        retry=retry,
        timeout=timeout,
        capability=capability,
        ray_name=ray_name,
    )
    if store_dir is not None:
        where = os.path.abspath(os.fspath(store_dir))
        info = handle.handshake()
        if info["open_error"] is not None:
            raise_error(info["open_error"])
        if info["store_dir"] != where:
            raise RequestError(
                f"context actor {name!r} in namespace {namespace!r} serves "
                f"{info['store_dir']}, not {where}",
                code="context_elsewhere",
            )
    return handle


def advertised(store_dir: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """Where the context actor holding ``<store_dir>/<name>`` says it runs, or None.

    The actor writes ``actor.json`` into the context's directory while it
    holds the store (:data:`actors.server.host.ADVERT_FILE`): ``address`` (its Ray
    cluster's address), ``namespace``, ``node_id``, ``pid``. None when there is
    no such file or it is not a well-formed advert. The file may be stale (its
    actor was killed): trust it only while the store is locked, and check the
    actor found with :func:`lookup` (``store_dir=``).
    """
    check_context_name(name)
    try:
        with open(advert_path(store_dir, name), "rb") as f:
            raw = f.read(MAX_ADVERT_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_ADVERT_BYTES:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != ADVERT_FORMAT
        or doc.get("context") != name
        or not all(isinstance(doc.get(k), str) and doc[k] for k in ("address", "namespace"))
    ):
        return None
    return doc
