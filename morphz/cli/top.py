"""``morphz top``: a live view of the context actors of a Ray cluster.

The contexts are found through Ray's directory of named actors: every context
actor is named ``ctx:<context>`` in its namespace (:mod:`actors.cluster.placement`), so
``ray.util.list_named_actors(all_namespaces=True)`` lists them all, wherever
they run. Each is asked for its counters (``stats``: group commits, commits,
rejections, rebases, duplicates, inbox depth, index lag), its ``meta``
(version, tick) and ``describe`` (node, process, guard denials) through a
:class:`~actors.client.handle.ContextHandle`. Rates are the change of a counter
between two samples over the seconds between them, so even ``--once`` samples
twice, ``--interval`` apart.

A context whose actor cannot answer (restarting, or serving with enforcement
and no ``--capability`` granting ``admin``) is shown with the error's code
instead of figures; the others are unaffected. ``--json`` prints one document
(with ``--once``) or one per refresh. Ray is imported only when the command runs.
"""

from __future__ import annotations

import asyncio
import io
import os
import time
from pathlib import Path
from typing import Any

import click

from morphz.cli.console import Env, emit, run_command

__all__ = ["collect", "rates", "top_cmd"]

NO_ACTORS_HINT = (
    "no context actors on this cluster: one starts with `morphz serve`, `morphz mcp`"
    " (given RAY_ADDRESS), `morphz loadtest` or actors.connect(...) in Python;"
    " `morphz actors` lists them"
)
"""What ``top`` says under an empty table."""

CALL_TIMEOUT = 5.0
"""Seconds one context actor has to answer a sample."""


async def _sample_one(name: str, namespace: str, token: bytes | None) -> dict[str, Any]:
    from actors.client.lookup import lookup
    from actors.client.transport import RetryPolicy
    from protocol.errors import MorphzError

    row: dict[str, Any] = {"context": name, "namespace": namespace}
    try:
        handle = lookup(
            name,
            namespace,
            retry=RetryPolicy(attempts=1),
            timeout=CALL_TIMEOUT,
            capability=token,
        )
        stats, meta, info = await asyncio.gather(
            handle.stats_async(), handle.meta.aio(), handle.describe_async()
        )
    except MorphzError as e:
        row["error"] = {"code": e.code, "message": e.message}
        return row
    row.update(
        version=meta.version,
        tick=meta.tick,
        node_id=info.get("node_id", ""),
        pid=info.get("pid"),
        denials=info.get("denials", 0),
        **{k: v for k, v in stats.items() if isinstance(v, int)},
    )
    return row


def collect(namespace: str | None = None, token: bytes | None = None) -> list[dict[str, Any]]:
    """One sample of every context actor on the cluster this process is connected to
    (only those of *namespace* if given), sorted by namespace and context."""
    from actors.client.joining import ray_module
    from actors.client.names import CONTEXT_PREFIX

    ray = ray_module()
    found = sorted(
        (a["namespace"], a["name"][len(CONTEXT_PREFIX) :])
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(CONTEXT_PREFIX)
        and (namespace is None or a["namespace"] == namespace)
    )

    async def run() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(_sample_one(n, ns, token) for ns, n in found)))

    return asyncio.run(run())


def rates(
    before: list[dict[str, Any]], after: list[dict[str, Any]], seconds: float
) -> list[dict[str, Any]]:
    """*after*'s rows with ``commit_rate`` and ``rejection_rate`` (per second since
    *before*; None when a row is new, its actor restarted or it failed to answer)."""
    old = {(r["namespace"], r["context"]): r for r in before}
    out = []
    for row in after:
        row = dict(row)
        prev = old.get((row["namespace"], row["context"]))
        same = (
            prev is not None
            and "error" not in prev
            and "error" not in row
            and prev.get("pid") == row.get("pid")
            and seconds > 0
        )
        for counter, rate in (("commits", "commit_rate"), ("rejections", "rejection_rate")):
            if same and prev is not None and counter in row and counter in prev:
                row[rate] = round(max(0, row[counter] - prev[counter]) / seconds, 1)
            else:
                row[rate] = None
        out.append(row)
    return out


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(
        title=f"morphz top: {len(doc['contexts'])} contexts, rates over {doc['interval']} s",
        title_justify="left",
        caption=None if doc["contexts"] else NO_ACTORS_HINT,
        caption_justify="left",
    )
    for head in (
        "namespace",
        "context",
        "version",
        "tick",
        "commits/s",
        "commits",
        "rejects/s",
        "rejects",
        "rebased",
        "inbox",
        "index lag",
        "denials",
    ):
        table.add_column(head, justify="left" if head in ("namespace", "context") else "right")
    for r in doc["contexts"]:
        if "error" in r:
            table.add_row(r["namespace"], r["context"], f"[red]{r['error']['code']}[/red]")
            continue
        table.add_row(
            r["namespace"],
            r["context"],
            *(
                _cell(r.get(k))
                for k in (
                    "version",
                    "tick",
                    "commit_rate",
                    "commits",
                    "rejection_rate",
                    "rejections",
                    "rebases",
                    "pending",
                    "index_lag",
                    "denials",
                )
            ),
        )
    return table


def _render(doc: dict[str, Any]) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(width=160, file=out, color_system=None).print(_table(doc))
    return out.getvalue().rstrip()


@click.command("top")
@click.option("--once", is_flag=True, help="Print one table (or --json document) and exit.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60.0),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes (and over which rates are measured).",
)
@click.option(
    "--address",
    default=None,
    help="Ray cluster to watch (default: RAY_ADDRESS, else 'auto': the one started here).",
)
@click.option("--namespace", default=None, help="Only the context actors of this Ray namespace.")
@click.option(
    "--capability",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File holding a capability token with admin on the contexts (when enforced).",
)
@click.pass_obj
@run_command
def top_cmd(
    env: Env,
    once: bool,
    interval: float,
    address: str | None,
    namespace: str | None,
    capability: Path | None,
) -> None:
    """Watch the context actors of a Ray cluster: versions, commit rate, rejections, lag.

    Refreshed every --interval seconds until interrupted; --once prints one
    table (with --json, one document) and exits.
    """
    from actors.client.joining import init_ray, ray_module
    from morphz.cli.review import ActorOptions

    token = ActorOptions(address, namespace or "", capability).token()
    connected = init_ray(address or os.environ.get("RAY_ADDRESS") or "auto")
    try:
        before = collect(namespace, token)
        started = time.monotonic()
        if once:
            time.sleep(interval)
            after = collect(namespace, token)
            doc = {
                "interval": interval,
                "contexts": rates(before, after, time.monotonic() - started),
            }
            emit(env, doc, _render)
            return
        _live(env, before, started, interval, namespace, token)
    finally:
        if connected:
            ray_module().shutdown()


def _live(
    env: Env,
    before: list[dict[str, Any]],
    started: float,
    interval: float,
    namespace: str | None,
    token: bytes | None,
) -> None:
    """Refresh until interrupted (Ctrl-C ends it with exit 130, like every command)."""
    from rich.live import Live

    def step() -> dict[str, Any]:
        nonlocal before, started
        time.sleep(interval)
        after = collect(namespace, token)
        now = time.monotonic()
        doc = {"interval": interval, "contexts": rates(before, after, now - started)}
        before, started = after, now
        return doc

    if env.as_json:
        while True:
            emit(env, step(), _render)
    with Live(_table({"interval": interval, "contexts": before}), auto_refresh=False) as live:
        while True:
            live.update(_table(step()), refresh=True)
