"""``morphz contexts`` and ``morphz drop``: a store's contexts, listed and deleted.

Both call the service (:class:`service.store.Store`): ``contexts`` reads every
context read-only (so it works beside a running context actor); ``drop`` asks
for confirmation (``--yes`` for scripts) and is refused with ``store_locked``
while a writer holds the context. See ``docs/cli.md``.

``contexts --cluster`` lists instead the placement the cluster's context
directory records (``actors.cluster.status.placement_table``): each context's epoch,
primary and followers, every member's version and each follower's lag. It
reads the directory and never creates one. See ``docs/cluster.md``.
"""

from __future__ import annotations

from typing import Any

import click

from actors.client.names import DEFAULT_NAMESPACE
from morphz.cli.console import Env, emit, run_command

__all__ = ["contexts_cmd", "drop_cmd"]


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def _human_contexts(d: dict[str, Any]) -> str:
    if not d["contexts"]:
        return f"no contexts in {d['store']}; create one with `morphz init`"
    rows = [("context", "version", "tick", "frames", "events", "size")]
    for c in d["contexts"]:
        rows.append(
            (
                c["name"],
                str(c["version"]),
                str(c["tick"]),
                str(c["frames"]),
                str(c["events"]),
                _size(c["bytes"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def _version(v: int | None) -> str:
    return "?" if v is None else str(v)


def _node(m: dict[str, Any]) -> str:
    return str(m["node_id"])[:12] + ("" if m["node_alive"] else " (dead)")


def _ago(when: float | None) -> str:
    """A wall-clock time as how long ago ("-" when unknown)."""
    if when is None:
        return "-"
    import time

    return f"{max(0.0, time.time() - when):.0f}s ago"


def _human_cluster(d: dict[str, Any]) -> str:
    moved = d.get("moved")
    if moved is not None:
        lines = [f"{host}: moved {', '.join(names)}" for host, names in sorted(moved.items())]
        head = "\n".join(lines) or "rebalance: no idle context on a full host"
        return head + "\n" + _human_table(d)
    return _human_table(d)


def _human_table(d: dict[str, Any]) -> str:
    if not d["contexts"]:
        running = d.get("unplaced") or []
        if running:
            names = ", ".join(f"{a['context']} ({a['namespace']})" for a in running)
            return (
                f"no context is placed through a directory in namespace {d['namespace']};"
                f" context actors started without placement run: {names}"
                " (`morphz actors --all` lists them with node, pid and age)"
            )
        why = "no context directory" if not d["directory"] else "no placed contexts"
        return (
            f"{why} in namespace {d['namespace']}; place contexts with actors.place(...)"
            " or `morphz loadtest`"
        )
    rows = [
        (
            "context",
            "epoch",
            "primary node",
            "version",
            "host",
            "state",
            "last use",
            "follower node",
            "version",
            "lag",
        )
    ]
    for c in d["contexts"]:
        p = c["primary"]
        host = (p.get("host") or "-").removeprefix("host:")
        first = (
            c["name"],
            str(c["epoch"]),
            _node(p),
            _version(p["version"]),
            host,
            p.get("state") or "?",
            _ago(p.get("last_use")),
        )
        if not c["followers"]:
            rows.append((*first, "-", "", ""))
        for k, f in enumerate(c["followers"]):
            lead = first if k == 0 else ("",) * len(first)
            rows.append((*lead, _node(f), _version(f["version"]), _version(f["lag"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _cluster_doc(address: str | None, namespace: str, rebalance: bool = False) -> dict[str, Any]:
    """The placement table of *namespace*'s directory (joining the cluster for the call);
    with *rebalance*, after the directory moved idle contexts off full hosts (``moved``)."""
    import os

    from actors.client.joining import check_text, init_ray, ray_module
    from actors.cluster.directory_handle import existing_directory
    from actors.cluster.status import placement_table
    from protocol.errors import NotFound

    check_text(namespace, "namespace")
    connected = init_ray(address or os.environ.get("RAY_ADDRESS") or "auto")
    unplaced: list[dict[str, Any]] = []
    moved: dict[str, list[str]] | None = None
    try:
        handle = existing_directory(namespace)
        if rebalance:
            if handle is None:
                raise NotFound(f"no context directory in namespace {namespace!r}")
            moved = handle.rebalance()
        rows = [] if handle is None else placement_table(handle)
        if not rows:  # actors started by connect() (mcp, serve) are not in any directory
            from morphz.cli.actors import list_actors

            unplaced = [
                {"context": a["context"], "namespace": a["namespace"]} for a in list_actors()
            ]
    finally:
        if connected:
            ray_module().shutdown()
    doc = {
        "namespace": namespace,
        "directory": handle is not None,
        "contexts": rows,
        "unplaced": unplaced,
    }
    return doc if moved is None else {**doc, "moved": moved}


@click.command("contexts")
@click.option(
    "--cluster",
    is_flag=True,
    help="Show the cluster's placement (context directory) instead of the store's contexts.",
)
@click.option(
    "--address",
    default=None,
    help="With --cluster: Ray cluster to join (default: RAY_ADDRESS, else the one `ray start`"
    " started on this machine).",
)
@click.option(
    "--namespace",
    default=DEFAULT_NAMESPACE,
    show_default=True,
    help="With --cluster: the Ray namespace.",
)
@click.option(
    "--rebalance",
    is_flag=True,
    help="With --cluster: first move idle contexts off context hosts that report themselves"
    " full (at most 100), each to the least loaded host with room on its node.",
)
@click.pass_obj
@run_command
def contexts_cmd(
    env: Env, cluster: bool, address: str | None, namespace: str, rebalance: bool
) -> None:
    """List the store's contexts: version, tick, frames, events and size on disk.

    With --cluster: every placed context of the cluster — epoch, primary node,
    its context host, state (active / idle) and last use when it is hosted,
    followers, each member's version ("?" when it does not answer) and each
    follower's lag behind the primary. With --rebalance too, the directory first
    moves idle contexts off full context hosts (``moved``: the names, by host left).
    """
    if rebalance and not cluster:
        raise click.UsageError("--rebalance goes with --cluster")
    if cluster:
        emit(env, _cluster_doc(address, namespace, rebalance), _human_cluster)
        return
    from service.store import Store

    infos = Store(env.store).contexts_info()
    doc = {"store": env.store, "contexts": [i.model_dump() for i in infos]}
    emit(env, doc, _human_contexts)


@click.command("drop")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (for scripts).")
@click.pass_obj
@run_command
def drop_cmd(env: Env, name: str, yes: bool) -> None:
    """Delete the context NAME and everything it holds, after confirmation.

    Refused (store_locked) while a context actor or another writer holds it.
    """
    from protocol.errors import RequestError, StoreLocked
    from service.store import Store
    from storage import check_context_name

    check_context_name(name)
    store = Store(env.store)
    info = store.info(name)  # not_found before any question
    if not yes:
        question = (
            f"drop context {name!r} ({info.frames} frames, {info.events} events, "
            f"{_size(info.bytes)}) from {env.store}? This cannot be undone"
        )
        try:
            confirmed = click.confirm(question, default=False, err=True)
        except click.Abort as e:
            if isinstance(e.__context__, KeyboardInterrupt):
                raise
            click.echo(err=True)  # end the unanswered prompt's line
            confirmed = False  # no answer (stdin closed)
        if not confirmed:
            raise RequestError(
                f"context {name!r} not dropped: not confirmed (pass --yes in scripts)",
                code="not_confirmed",
            )
    try:
        dropped = store.drop(name)
    except StoreLocked as e:
        from morphz.cli.holder import holder_note

        raise StoreLocked(holder_note(env.store, name, e.message)) from e
    doc = {"dropped": name, "store": env.store, **dropped.model_dump()}
    emit(
        env,
        doc,
        lambda d: f"dropped context {d['dropped']} ({d['frames']} frames, {d['events']} events)",
    )
