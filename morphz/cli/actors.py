"""``morphz actors`` and ``morphz stop``: the context actors serving a store, listed and stopped.

A context actor started detached (by the first ``morphz mcp`` given a Ray
address, by ``morphz serve``, by ``actors.connect(..., lifetime="detached")``)
outlives whoever started it. ``actors`` finds them through Ray's directory of
named actors (every context actor is named ``ctx:<context>``), asks each its
handshake (open to every caller: store directory, node, pid, start time) and
lists those serving ``--store`` (``--all``: every one on the cluster). ``stop
NAME`` closes the actor serving context NAME of ``--store`` cleanly (its
advert in the store removed, the writer lock released), then ends it for good.

The cluster is the one named by ``--address``, else ``RAY_ADDRESS``, else the
address the actors of the store advertise in it; with none of these, nothing
serves the store and nothing is joined. Ray is imported only when needed.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import click

from morphz.cli.console import Env, emit, run_command

__all__ = ["actors_cmd", "list_actors", "stop_cmd"]

CALL_TIMEOUT = 5.0
"""Seconds one context actor has to answer its handshake."""


def _adverts(store: str) -> list[dict[str, Any]]:
    """The adverts the context actors holding *store*'s contexts wrote into it."""
    from actors.client.lookup import advertised
    from service.store import Store

    if not os.path.isdir(store):
        return []
    found = (advertised(store, name) for name in Store(store).contexts())
    return [a for a in found if a is not None]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


async def _row(name: str, namespace: str) -> dict[str, Any]:
    from actors.client.lookup import lookup
    from actors.client.transport import RetryPolicy
    from protocol.errors import MorphzError

    row: dict[str, Any] = {"context": name, "namespace": namespace}
    try:
        handle = lookup(name, namespace, retry=RetryPolicy(attempts=1), timeout=CALL_TIMEOUT)
        info = await handle.handshake_async()
    except MorphzError as e:
        row["error"] = {"code": e.code, "message": e.message}
        return row
    started = info.get("started_at")
    row.update(
        store_dir=info.get("store_dir"),
        node_id=info.get("node_id"),
        pid=info.get("pid"),
        age_s=None if started is None else round(max(0.0, time.time() - float(started)), 1),
        open_error=info.get("open_error"),
    )
    return row


def list_actors(namespace: str | None = None) -> list[dict[str, Any]]:
    """Every context actor on the cluster this process is connected to (of *namespace* if
    given), with its handshake: store directory, node, pid, age; sorted by namespace, name."""
    from actors.client.joining import ray_module
    from actors.client.names import CONTEXT_PREFIX

    named = sorted(
        (a["namespace"], a["name"][len(CONTEXT_PREFIX) :])
        for a in ray_module().util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(CONTEXT_PREFIX)
        and (namespace is None or a["namespace"] == namespace)
    )

    async def run() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(_row(n, ns) for ns, n in named)))

    return asyncio.run(run())


def _human_actors(d: dict[str, Any]) -> str:
    silent = d["unanswered"] and not d["all"]
    tail = f"\n({d['unanswered']} context actor(s) did not answer: see --all)" if silent else ""
    return _actors_table(d) + tail


def _actors_table(d: dict[str, Any]) -> str:
    if not d["actors"]:
        if d["address"] is None:
            return (
                f"no context actor holds a context of {d['store']} (none advertises itself"
                " in it); give --address (or RAY_ADDRESS) to list a cluster's"
            )
        scope = "on the cluster" if d["all"] else f"serves {d['store']}"
        more = "" if d["all"] else " (`morphz actors --all` lists every one)"
        return f"no context actor {scope} at {d['address']}{more}"
    rows = [("context", "namespace", "node", "pid", "age", "store")]
    for a in d["actors"]:
        if "error" in a:
            rows.append((a["context"], a["namespace"], a["error"]["code"], "", "", ""))
            continue
        rows.append(
            (
                a["context"],
                a["namespace"],
                str(a["node_id"] or "")[:12],
                str(a["pid"]),
                _age(a["age_s"]),
                str(a["store_dir"]) + (" (open failed)" if a.get("open_error") else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _cluster_of(env: Env, address: str | None, context: str | None = None) -> str | None:
    """The cluster to look in: --address, RAY_ADDRESS, else what the store's actors advertise."""
    if address or os.environ.get("RAY_ADDRESS"):
        return address or os.environ.get("RAY_ADDRESS")
    adverts = _adverts(env.store)
    if context is not None:
        adverts = [a for a in adverts if a.get("context") == context]
    return str(adverts[0]["address"]) if adverts else None


@click.command("actors")
@click.option("--all", "every", is_flag=True, help="Every context actor on the cluster.")
@click.option(
    "--address",
    default=None,
    help="Ray cluster (default: RAY_ADDRESS, else the one the store's actors advertise).",
)
@click.option("--namespace", default=None, help="Only the context actors of this Ray namespace.")
@click.pass_obj
@run_command
def actors_cmd(env: Env, every: bool, address: str | None, namespace: str | None) -> None:
    """List the context actors serving the store (--all: on the whole cluster):
    context, namespace, node, pid, age."""
    from actors.client.joining import init_ray, ray_module

    store = os.path.abspath(env.store)
    target = _cluster_of(env, address)
    doc: dict[str, Any] = {
        "store": store,
        "address": target,
        "all": every,
        "actors": [],
        "unanswered": 0,
    }
    if target is not None:
        connected = init_ray(target)
        try:
            rows = list_actors(namespace)
        finally:
            if connected:
                ray_module().shutdown()
        # An actor that does not answer cannot say which store it serves: --all shows it.
        doc["actors"] = [r for r in rows if every or _same(r.get("store_dir"), store)]
        doc["unanswered"] = sum(1 for r in rows if "error" in r)
    emit(env, doc, _human_actors)


def _same(a: Any, b: str) -> bool:
    return isinstance(a, str) and os.path.realpath(a) == os.path.realpath(b)


@click.command("stop")
@click.argument("name")
@click.option(
    "--address",
    default=None,
    help="Ray cluster (default: RAY_ADDRESS, else the one the actor advertises in the store).",
)
@click.option(
    "--namespace",
    default=None,
    help="Ray namespace of the actor (default: the advertised one, else morphz).",
)
@click.option(
    "--capability",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File holding a capability token with admin on the context (when enforced).",
)
@click.pass_obj
@run_command
def stop_cmd(
    env: Env, name: str, address: str | None, namespace: str | None, capability: Path | None
) -> None:
    """Stop the context actor serving context NAME of the store: its store closed cleanly
    (advert removed, lock released), then the actor ended for good."""
    from actors.client.joining import init_ray, ray_module
    from actors.client.lookup import advertised, lookup
    from actors.client.names import DEFAULT_NAMESPACE, advert_path
    from morphz.cli.review import ActorOptions
    from protocol.errors import NotFound
    from storage import check_context_name

    check_context_name(name)
    token = ActorOptions(address, namespace or "", capability).token()
    advert = advertised(env.store, name)
    target = _cluster_of(env, address, name)
    if target is None:
        raise NotFound(
            f"no context actor serves {name!r} of {env.store}: none advertises itself in the"
            " store; give --address (or RAY_ADDRESS) to look in a cluster"
        )
    ns = namespace or str((advert or {}).get("namespace") or DEFAULT_NAMESPACE)
    connected = init_ray(target)
    try:
        try:
            handle = lookup(name, ns, store_dir=env.store, capability=token)
        except NotFound as e:
            raise NotFound(
                f"no context actor {name!r} in namespace {ns!r} of the Ray cluster at {target}"
            ) from e
        info = handle.handshake()
        handle.close()  # refused (denied) without admin on an enforcing context: nothing stops
        handle.shutdown()
    finally:
        if connected:
            ray_module().shutdown()
    left = advertised(env.store, name)
    if left is not None and left.get("pid") == info.get("pid"):
        try:  # its process is gone: the advert it could not remove is stale
            os.unlink(advert_path(env.store, name))
        except OSError:
            pass
    doc = {
        "stopped": name,
        "namespace": ns,
        "node_id": info.get("node_id"),
        "pid": info.get("pid"),
        "store": os.path.abspath(env.store),
        "advert_removed": advertised(env.store, name) is None,
    }
    emit(
        env,
        doc,
        lambda d: (
            f"stopped context actor {d['stopped']} (pid {d['pid']} on node"
            f" {str(d['node_id'])[:12]}); {d['store']} is free"
        ),
    )
