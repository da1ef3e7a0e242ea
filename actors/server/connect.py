"""Starting a context actor: :func:`connect` gets or creates the actor serving one
context's store, pinned to the node that holds it, and answers its
:class:`~actors.client.handle.ContextHandle`.

:func:`connect` never touches the context directory, so single-node use needs
no cluster. A context placed on a cluster (:func:`actors.cluster.placing.place`)
is started through this function too, with the cluster's replication hook.
Arguments are checked before any remote call; a context that cannot be opened
raises the typed error of the failed open.
"""

from __future__ import annotations

import os

from actors.client.handle import ContextHandle
from actors.client.names import DEFAULT_NAMESPACE, actor_name
from actors.client.nodes import check_node, current_node_id, ensure_ray, pinned
from actors.client.replies import raise_error
from actors.client.transport import RetryPolicy, check_int, check_text, remote_class
from actors.server.context_actor import ContextActor
from actors.server.host import Replication
from adapters.embeddings import EmbedderConfig
from protocol.errors import RequestError
from protocol.governance import AdmissionPolicy, check_every, check_scan
from service.context import MAX_WINDOW
from storage import check_context_name
from storage.replication.recording import check_retain

MAX_CONCURRENCY = 1000
"""Calls one context actor's event loop accepts at once."""

__all__ = ["MAX_CONCURRENCY", "connect"]


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
    if replication_log is not None:
        check_retain(replication_log)
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
            replication=replication,
            replication_log=replication_log,
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
