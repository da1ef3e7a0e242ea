"""Placing a context on a cluster: :func:`place` asks the context directory
(:mod:`actors.cluster.directory`) where the context goes, starts its primary there
(:func:`actors.server.connect.connect`, given the replication hook) and its
followers (:func:`actors.cluster.follower.start_followers`).

The directory is created by :func:`place` (or ``morphz contexts --cluster`` /
``morphz loadtest``); single-node use (:func:`~actors.server.connect.connect`)
never touches it. Arguments are checked before any remote call.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.joining import check_int, check_text, ray_module
from actors.client.lookup import lookup
from actors.client.names import DEFAULT_NAMESPACE, HOST_PREFIX, is_host
from actors.cluster.directory_handle import directory
from actors.cluster.follower import start_followers
from actors.cluster.placement import POLICY_SPREAD, check_policy
from actors.cluster.replication import REPLICATION
from actors.server.connect import connect
from actors.server.hosting import activate_hosted
from protocol.errors import HOSTED_UNREPLICATED, NotFound, RequestError
from storage import check_context_name

__all__ = ["place"]


def place(
    name: str,
    *,
    followers: int = 0,
    placement: str = POLICY_SPREAD,
    acks: int | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    lifetime: str | None = "detached",
    create: bool = True,
    replicas: int | None = None,
    hosted: bool = False,
    **options: Any,
) -> ContextHandle:
    """Get or create context *name* on the node the context directory chooses.

    *placement*: ``"spread"`` (the live node holding the fewest context members,
    ties to the smallest node id), ``"node:<id>"`` (that node) or
    ``"resource:<name>"`` (the least-loaded live node offering that custom
    resource). The store goes under the chosen node's store root (registered
    with the directory, else ``MORPHZ_STORE`` on that node, else ``~/.morphz``
    there), or under *store_dir* (absolute, a path on that node) if given.
    *followers* follower nodes are chosen too (all distinct); *acks* is how many
    of them must hold a commit before it is acknowledged (default *followers*).
    *replicas* is the earlier name of *followers* (deprecated: it warns).

    ``hosted=True`` places the context on a running context host
    (:mod:`actors.server.hosting`) instead of an actor process of its own: the
    directory picks the host by the hosts' load reports (``no_host`` when none
    has room), and the host activates the context now and again on demand after
    idle deactivations. A hosted context has no followers: asking for them raises
    ``RequestError`` ``hosted_unreplicated`` (docs/cluster.md says what it gives up).

    Idempotent: a context already in the directory is found where it is (its
    current primary), whatever the arguments. The actor is detached by default
    (the directory's entry outlives this process; stop it with
    ``handle.shutdown()`` and forget it with ``directory().remove(name)``).
    Other *options* are :func:`connect`'s (window, tenant, enforce …); ``capability``
    also goes with the placement to the directory (a directory with admin keys places a
    new context only for an admin capability on it). Errors
    are typed and change nothing: ``bad_placement``, ``not_found`` (unknown
    node or resource), ``not_enough_nodes``, ``bad_context_name`` …
    """
    check_context_name(name)
    check_policy(placement)
    if "node_id" in options:
        raise RequestError("place chooses the node: use placement='node:<id>'", code="bad_argument")
    if replicas is not None:
        warnings.warn(
            "place(replicas=N) is deprecated: use place(followers=N)",
            DeprecationWarning,
            stacklevel=2,
        )
        followers = replicas
    check_int(followers, "followers")
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
    if hosted and followers:
        raise RequestError(
            "a hosted context has no followers: place it with hosted=False to replicate it",
            code=HOSTED_UNREPLICATED,
        )
    if hosted and store_dir is not None:
        raise RequestError(
            "a hosted context lives under its host's store root", code="bad_argument"
        )
    where = directory(namespace, capability=options.get("capability"))
    if hosted:
        entry = where.place_hosted(name, policy=placement)
    else:
        entry = where.place(name, followers=followers, policy=placement, acks=acks, store_dir=root)
    if is_host(entry.primary.actor):
        return _on_host(entry.primary.actor, name, namespace, create, options)
    if entry.epoch > 0:  # promoted since: the promoted follower serves it
        return lookup(name, namespace, retry=options.get("retry"), timeout=options.get("timeout"))
    handle = connect(
        name,
        store_dir=entry.primary.store_dir,
        node_id=entry.primary.node_id,
        namespace=namespace,
        lifetime=lifetime,
        create=create,
        replication=REPLICATION,
        **options,
    )
    if entry.followers:
        start_followers(handle, entry)
    return handle


def _on_host(
    actor: str, name: str, namespace: str, create: bool, options: dict[str, Any]
) -> ContextHandle:
    """The handle of *name* on the context host *actor*, activated there."""
    client = {k: options.pop(k) for k in ("retry", "timeout", "capability") if k in options}
    try:
        host = ray_module().get_actor(actor, namespace=namespace)
    except ValueError as e:
        raise NotFound(f"context host {actor!r} of context {name!r} is not running") from e
    return activate_hosted(
        host,
        actor[len(HOST_PREFIX) :],
        name,
        namespace=namespace,
        options={"create": create, **options},
        **client,
    )
