"""Finding a running context actor: :func:`lookup` (by name, anywhere in the cluster,
following the context directory to a replicated context's current primary) and
:func:`advertised` (where the actor holding a store says it runs, from the file it
writes into the context's directory).

:func:`directory_entry` reads one context's entry from its namespace's context
directory, by the directory's actor name: the client side never imports the
directory's code (:mod:`actors.cluster.directory`), only the entry's model
(:class:`~actors.client.names.ContextEntry`). Arguments are checked before any
remote call.
"""

from __future__ import annotations

import json
import os
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.joining import check_text, ray_module
from actors.client.leader import directory_actor, directory_target
from actors.client.names import (
    ADVERT_FORMAT,
    DEFAULT_NAMESPACE,
    DIRECTORY_NAME,
    ContextEntry,
    actor_name,
    advert_path,
    is_host,
)
from actors.client.nodes import ensure_ray
from actors.client.replies import open_reply, raise_error
from actors.client.transport import Call, RetryPolicy, Transport
from protocol.errors import NotFound, RequestError, TransportError
from storage import check_context_name

MAX_ADVERT_BYTES = 4096
"""Larger advert files are not adverts."""

__all__ = ["MAX_ADVERT_BYTES", "advertised", "directory_actor", "directory_entry", "lookup"]


def directory_entry(
    name: str, namespace: str = DEFAULT_NAMESPACE, *, retry: RetryPolicy | None = None
) -> ContextEntry | None:
    """Context *name*'s entry in the context directory of *namespace*; None when the
    namespace has no directory. ``NotFound`` when the directory has no such entry,
    ``TransportError`` when it cannot be reached after the retries."""
    check_context_name(name)
    target = directory_target(namespace)
    if target is None:
        return None
    transport = Transport(
        target[1], target[0], label=DIRECTORY_NAME, namespace=namespace, retry=retry
    )
    return transport.call(Call("get", (name,), read_entry, guarded=False))


def read_entry(raw: Any) -> ContextEntry:
    """The :class:`~actors.client.names.ContextEntry` a directory reply carries."""
    return ContextEntry.model_validate(open_reply(raw))


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
    handle is its current primary's actor; otherwise ``ctx:<name>``. A context
    the directory places on a context host (``place(hosted=True)``) is activated
    there now (its open error, ``host_full`` … raised here); if that host was
    stopped for good, the directory first moves the context to another host of its
    node serving the same store root (``no_host`` when none can take it). Without a
    directory entry and with *store_dir*, a context active on a host is found
    through its advert. Raises :class:`NotFound` if no such actor exists in *namespace*. With
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
    try:
        entry = directory_entry(name, namespace)
    except NotFound:
        entry = None  # not placed through the directory: the single-node name
    except TransportError:
        entry = None  # the directory is unreachable: the epoch-0 name, as without one
    if entry is not None:
        ray_name = entry.primary.actor
    actor = _running(ray_name, namespace)
    if actor is None and entry is not None and is_host(ray_name):
        # its host was stopped for good: the directory moves it to another of its node
        entry = _rehosted(name, namespace, ray_name, capability)
        ray_name = entry.primary.actor
        actor = _running(ray_name, namespace)
    if actor is None and entry is None and store_dir is not None:
        advert = advertised(store_dir, name)  # a context active on a host no directory knows
        hosted = str((advert or {}).get("actor") or "")
        if is_host(hosted) and (advert or {}).get("namespace") == namespace:
            ray_name, actor = hosted, _running(hosted, namespace)
    if actor is None:
        raise NotFound(f"no context actor {name!r} in namespace {namespace!r}")
    handle = ContextHandle(
        actor,
        name,
        namespace=namespace,
        retry=retry,
        timeout=timeout,
        capability=capability,
        ray_name=ray_name,
    )
    if store_dir is not None or is_host(ray_name):
        info = handle.handshake()  # on a host, this activates the context
        if info["open_error"] is not None:
            raise_error(info["open_error"])
        where = None if store_dir is None else os.path.abspath(os.fspath(store_dir))
        if where is not None and info["store_dir"] != where:
            raise RequestError(
                f"context actor {name!r} in namespace {namespace!r} serves "
                f"{info['store_dir']}, not {where}",
                code="context_elsewhere",
            )
    return handle


def _running(ray_name: str, namespace: str) -> Any | None:
    """The Ray handle of the actor named *ray_name* in *namespace*, or None."""
    try:
        return ray_module().get_actor(ray_name, namespace=namespace)
    except ValueError:
        return None


def _rehosted(
    name: str, namespace: str, host: str, capability: bytes | None = None
) -> ContextEntry:
    """The entry of the hosted context *name* after the directory moved it off *host*
    (which no longer runs): ``no_host`` when no other host of its node can take it. The
    call carries *capability* (a closed directory wants a grant on *name*)."""
    target = directory_target(namespace)
    if target is None:
        raise NotFound(f"no context directory in namespace {namespace!r}")
    transport = Transport(
        target[1], target[0], label=DIRECTORY_NAME, namespace=namespace, capability=capability
    )
    return transport.call(Call("rehost", (name, host), read_entry))


def advertised(store_dir: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """Where the context actor holding ``<store_dir>/<name>`` says it runs, or None.

    The actor writes ``actor.json`` into the context's directory while it
    holds the store (:data:`actors.client.names.ADVERT_FILE`): ``address`` (its Ray
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
