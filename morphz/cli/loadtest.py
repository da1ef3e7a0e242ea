"""The ``morphz loadtest`` command: many agent threads on context actors, every history checked.

It runs :func:`harness.loadtest.run_loadtest` (see docs/loadtest.md) and prints
a table, or with ``--json`` one JSON document on stdout. Exit 0 when the
history checker found no violation, 1 otherwise (or when the run could not be
made, e.g. ``ray_unreachable``), 2 on a usage error, 130 after SIGINT (once the
partial report and the history check of what committed are printed).

The contexts go into a temporary store, removed afterwards, unless a store is
given (``loadtest --store DIR``, or the global ``--store`` on the command line;
``MORPHZ_STORE`` alone does not count: it names the user's own memory).
Register it on the ``morphz`` group with ``cli.add_command(loadtest_cmd)``.
Ray is imported only when the command runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import click

from morphz.cli.console import EXIT_INTERRUPTED, EXIT_REFUSED, Env, print_json, run_command
from morphz.cli.nemeses import nemesis_from, nemesis_options


class _Bar:
    """A rich progress bar on stderr fed by run_loadtest's progress callback."""

    def __init__(self, duration: float | None, transactions: int | None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.duration = duration
        self.progress = Progress(
            TextColumn("[bold]loadtest[/bold]"),
            BarColumn(),
            TextColumn("{task.fields[what]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        total = duration if duration is not None else float(transactions or 1)
        self.task = self.progress.add_task("load", total=total, what="starting")

    def update(self, p: Mapping[str, Any]) -> None:
        if "phase" in p:  # before the load: what is being started
            self.progress.update(self.task, what=str(p["phase"]))
            return
        done = p["elapsed_s"] if self.duration is not None else p["committed"]
        what = f"{p['committed']} committed, {p['kills']} kills"
        if p["done"]:
            what += ", checking histories"
            total = self.progress.tasks[0].total
            self.progress.update(self.task, completed=total, what=what)
        else:
            self.progress.update(self.task, completed=done, what=what)

    @contextlib.contextmanager
    def shown(self) -> Iterator[_Bar]:
        with self.progress:
            yield self


def _human(doc: Mapping[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a file or a pipe: wide enough for the per-context table
        console = Console(width=120)
    lat = doc["latency_ms"]
    bound = doc["requested"]
    title = f"morphz loadtest {doc['run_id']} ({doc['workload']})"
    if doc.get("interrupted"):
        title += " — interrupted: what was submitted until then"
    summary = Table(title=title, show_header=False)
    summary.add_column("figure", style="bold")
    summary.add_column("value", justify="right")
    rows = [
        (
            "threads / contexts / agents",
            f"{doc['threads']} / {doc['contexts']} / {doc['agents']}"
            + (f" (pipeline {doc['pipeline']})" if doc.get("pipeline", 1) > 1 else ""),
        ),
        ("conflict rate", f"{doc['conflict_rate']:.0%} ({doc['shared_frames']} shared frame(s))"),
        ("asked", ", ".join(f"{k} {v}" for k, v in bound.items())),
        ("duration", f"{doc['duration_s']:.2f} s"),
        ("steps", str(doc["steps"])),
        ("committed", f"{doc['committed']} ({doc['rebased']} rebased)"),
        ("rejected", f"{doc['rejected']} ({doc['retried']} retried, {doc['gave_up']} gave up)"),
        ("unknown outcome", str(doc["unknown"])),
        ("throughput", f"{doc['throughput_tx_s']:.1f} commits/s"),
        ("latency p50 / p99", f"{lat['p50']:.1f} / {lat['p99']:.1f} ms"),
        ("CPU per commit", cpu_text(doc.get("cpu_ms_per_commit") or {})),
        ("bookkeeping", bookkeeping_text(doc.get("bookkeeping") or {})),
        ("kills", str(doc["kills"])),
        (
            "history",
            (
                "[green]ok[/green]"
                if doc["history_ok"]
                else f"[red]{doc['violation_count']} violation(s)[/red]"
            )
            + f" ({checked_text(doc.get('checked') or {})})",
        ),
    ]
    base = doc.get("baseline")
    if base:
        blat = base["latency_ms"]
        bcpu = base["cpu_ms_per_call"]
        rows.append(
            (
                "bare Ray baseline",
                f"{base['calls_s']:.1f} calls/s by {base['clients']} client(s), "
                f"p50 / p99 {blat['p50']:.1f} / {blat['p99']:.1f} ms, CPU per call "
                f"{bcpu['server']:.2f} ms no-op actor, {bcpu['clients']:.2f} ms clients",
            )
        )
        rows.append(("commits / baseline", f"{doc['ratio_to_baseline']:.3f}"))
    contention = doc.get("contention")
    if contention is not None:
        rows.append(
            (
                "per 1,000 commits",
                f"{contention['rejections_per_1000_commits']:.1f} rejections, "
                f"{contention['false_conflicts_per_1000_commits']:.1f} false conflicts "
                f"(shared: {contention['shared_mode']})",
            )
        )
    if "store" in doc:
        kept = doc.get("store_kept", True)
        rows.append(("store", doc["store"] + ("" if kept else " (temporary, removed)")))
    for name, value in rows:
        summary.add_row(name, value)
    console.print(summary)

    table = Table(title="per context")
    for col in ("context", "version", "committed", "rejected", "tx/s", "p50 ms", "p99", "kills"):
        table.add_column(col, justify="left" if col == "context" else "right")
    table.add_column("history")
    for c in doc["per_context"]:
        table.add_row(
            c["name"],
            str(c["version"]),
            str(c["committed"]),
            str(c["rejected"]),
            f"{c['throughput_tx_s']:.1f}",
            f"{c['latency_ms']['p50']:.1f}",
            f"{c['latency_ms']['p99']:.1f}",
            str(c["kills"]),
            "ok" if c["history_ok"] else f"{c['violations']} violation(s)",
        )
    console.print(table)
    for v in doc["violations"][:20]:
        console.print(f"[red]{v['kind']}[/red] {escape(v['context'])}: {escape(v['detail'])}")
    if doc["violation_count"] > 20:
        console.print(f"… and {doc['violation_count'] - 20} more (see --json)")


def cpu_text(cpu: Mapping[str, Any]) -> str:
    """CPU milliseconds per commit of the context actors and of the agents (of it, their
    event loops'), in words."""
    ctx, loop = cpu.get("contexts"), cpu.get("agents_loop")
    return (
        f"{'?' if ctx is None else f'{ctx:.2f}'} ms context actor(s), "
        f"{cpu.get('agents') or 0:.2f} ms agents"
        + ("" if loop is None else f" ({loop:.2f} ms in their event loops)")
    )


def bookkeeping_text(book: Mapping[str, Any]) -> str:
    """The load test's own work in the agents, in words."""
    share = book.get("share_of_agent_cpu")
    return f"{book.get('ms_per_commit') or 0:.3f} ms per commit" + (
        "" if share is None else f" ({share:.1%} of the agents' CPU)"
    )


def checked_text(checked: dict[str, int]) -> str:
    """What the history check covered, in words (after ``history ok``)."""
    return (
        f"{checked.get('submissions', 0)} submissions matched against "
        f"{checked.get('log_records', 0)} log records, "
        f"{checked.get('replayed', 0)} of them replayed to the same final state, "
        f"{checked.get('acknowledged_on_disk', 0)} acknowledged commits read back from disk;"
        " no lost update, duplicate or unjustified rejection"
    )


@click.command("loadtest")
@click.option("--threads", type=click.IntRange(1, 4096), required=True, help="Agent threads.")
@click.option(
    "--contexts",
    type=click.IntRange(1, 1_000_000),
    default=1,
    show_default=True,
    help="Contexts: context actors (at most 256), or with --hosts contexts on hosts.",
)
@click.option(
    "--hosts",
    type=click.IntRange(1, 64),
    default=None,
    help="Serve the contexts on this many context hosts (activated on demand, deactivated "
    "when idle); --threads committers then wander over them (docs/loadtest.md).",
)
@click.option(
    "--idle-after",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="With --hosts: seconds after which an idle context is deactivated.",
)
@click.option(
    "--switch-every",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="With --hosts: seconds a committer stays on one context before moving to another.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Run for this many seconds.",
)
@click.option(
    "--transactions",
    type=click.IntRange(min=1),
    default=None,
    help="Or run this many transactions (steps) over all threads.",
)
@click.option(
    "--conflict-rate",
    type=click.FloatRange(0, 1),
    default=0.1,
    show_default=True,
    help="Share of transactions that write frames other threads also write.",
)
@click.option(
    "--shared-mode",
    type=click.Choice(["replace", "list", "fields"]),
    default="replace",
    show_default=True,
    help="How a trajectory step writes its domain's shared frame: replace its body, "
    "append to its list by read-modify-write (revise), or with (append …).",
)
@click.option(
    "--shared-frames",
    type=click.IntRange(1, 65),
    default=1,
    show_default=True,
    help="How many frames the synthetic threads share.",
)
@click.option(
    "--workload",
    type=click.Choice(["synthetic", "trajectories"]),
    default="synthetic",
    show_default=True,
)
@click.option(
    "--trajectories",
    "trajectories_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="STATE-Bench trajectory directory (<domain>/<n>-<name>.json), needed with "
    "--workload trajectories (default: $MORPHZ_TRAJECTORIES).",
)
@click.option(
    "--conversations",
    type=click.IntRange(min=1),
    default=None,
    help="Replay only the first N conversations.",
)
@click.option(
    "--kill-context-every",
    "kill_every",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="SIGKILL a context actor's process every S seconds (actors on this machine).",
)
@click.option(
    "--followers",
    type=click.IntRange(0, 8),
    default=0,
    show_default=True,
    help="Followers of each context on other nodes (docs/cluster.md).",
)
@click.option(
    "--replicas",
    "replicas",
    type=click.IntRange(0, 8),
    default=None,
    hidden=True,
    help="The earlier name of --followers (deprecated).",
)
@click.option(
    "--kill-node-every",
    "kill_node_every",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Start a test cluster of --nodes nodes on this machine and remove a node "
    "(adding it back) every S seconds.",
)
@nemesis_options
@click.option(
    "--nodes",
    type=click.IntRange(2, 16),
    default=3,
    show_default=True,
    help="Nodes of the test cluster made for --kill-node-every or a nemesis.",
)
@click.option(
    "--address", default=None, help="Ray cluster to join (default: RAY_ADDRESS, else a new one)."
)
@click.option(
    "--agents",
    type=click.IntRange(1, 256),
    default=None,
    help="Agent actors (default: one per thread, at most 32).",
)
@click.option(
    "--pipeline",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Transactions each synthetic thread keeps in flight (steps on the same frame wait).",
)
@click.option(
    "--reread-own",
    is_flag=True,
    help="Synthetic threads read before every step, also on their own frames only.",
)
@click.option(
    "--baseline",
    is_flag=True,
    help="Also measure, in the same run, bare Ray clients (one per agent) calling a no-op "
    "actor with a transaction-sized payload; report the ratio.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--keep", is_flag=True, help="Leave the context actors running afterwards.")
@click.option(
    "--store",
    "store_dir",
    default=None,
    help="Store directory for the load test's contexts, kept afterwards "
    "(default: a fresh temporary one, removed at the end).",
)
@click.pass_obj
@run_command
def loadtest_cmd(
    env: Env,
    threads: int,
    contexts: int,
    hosts: int | None,
    idle_after: float,
    switch_every: float,
    duration: float | None,
    transactions: int | None,
    conflict_rate: float,
    shared_frames: int,
    shared_mode: str,
    workload: str,
    trajectories_dir: str | None,
    conversations: int | None,
    kill_every: float | None,
    followers: int,
    replicas: int | None,
    kill_node_every: float | None,
    nodes: int,
    address: str | None,
    agents: int | None,
    pipeline: int,
    reread_own: bool,
    baseline: bool,
    seed: int,
    keep: bool,
    store_dir: str | None,
    **faults: float | None,
) -> None:
    """Load-test context actors with agent threads; check every history (exit 1 if not ok).

    Example: morphz --json loadtest --threads 8 --contexts 2 --duration 10 --conflict-rate 0.2
    """
    if replicas is not None:
        click.echo("morphz loadtest: --replicas is deprecated, use --followers", err=True)
    if (duration is None) == (transactions is None):
        raise click.UsageError("give exactly one of --duration and --transactions")
    if hosts is not None:
        _hosted(env, threads, contexts, hosts, idle_after, switch_every, duration, seed, keep,
                address, store_dir or _given_store(env))  # fmt: skip
        return
    if contexts > 256:
        raise click.UsageError("more than 256 contexts need --hosts (a process per context)")
    from harness.loadtest import run_loadtest

    options = {
        "threads": threads,
        "contexts": contexts,
        "duration_s": duration,
        "transactions": transactions,
        "conflict_rate": conflict_rate,
        "shared_frames": shared_frames,
        "shared_mode": shared_mode,
        "workload": workload,
        "trajectories_dir": trajectories_dir,
        "conversations": conversations,
        "kill_every_s": kill_every,
        "followers": followers if replicas is None else replicas,
        "kill_node_every_s": kill_node_every,
        "nemesis": nemesis_from(faults),
        "nodes": nodes,
        "address": address,
        "store_dir": store_dir or _given_store(env),
        "seed": seed,
        "agents": agents,
        "pipeline": pipeline,
        "reread_own": reread_own,
        "baseline": baseline,
        "keep": keep,
    }
    bar = None
    if not env.as_json and sys.stderr.isatty():
        bar = _Bar(duration, transactions)
    # Ray's driver prints worker and raylet messages (a killed actor …) on stdout:
    # send them to stderr so that stdout carries only the report.
    with contextlib.redirect_stdout(sys.stderr):
        joined = False
        own_cluster = kill_node_every is not None or options["nemesis"] is not None
        if bar is not None and not own_cluster:
            # Ray joined (or started) before the bar shows: what it says while starting
            # is printed above the bar, not into it.
            from actors.client.joining import init_ray

            target = address or os.environ.get("RAY_ADDRESS")
            click.echo(
                f"loadtest: joining the Ray cluster at {target}"
                if target
                else "loadtest: starting a local Ray cluster (about 10 s)",
                err=True,
            )
            joined = init_ray(address)
        try:
            if bar is not None:
                with bar.shown():
                    doc = run_loadtest(options, progress=bar.update)
            else:
                doc = run_loadtest(options)
        finally:
            if joined:
                import ray

                ray.shutdown()
    if env.as_json:
        print_json(doc)
    else:
        _human(doc)
    if doc.get("interrupted"):
        sys.exit(EXIT_INTERRUPTED)
    if not doc["history_ok"]:
        sys.exit(EXIT_REFUSED)


def _given_store(env: Env) -> str | None:
    """The global ``--store`` if it was given on the command line, else None (temporary)."""
    root = click.get_current_context().find_root()
    if root.get_parameter_source("store") is click.core.ParameterSource.COMMANDLINE:
        return env.store
    return None


def _hosted(
    env: Env,
    threads: int,
    contexts: int,
    hosts: int,
    idle_after: float,
    switch_every: float,
    duration: float | None,
    seed: int,
    keep: bool,
    address: str | None,
    store_dir: str | None,
) -> None:
    """``loadtest --hosts``: many contexts on context hosts, a hot set under load."""
    if duration is None:
        raise click.UsageError("--hosts runs for a --duration")
    from actors.client.joining import init_ray
    from harness.loadtest.many import run_many

    options = {
        "contexts": contexts,
        "hosts": hosts,
        "threads": threads,
        "duration_s": duration,
        "idle_after_s": idle_after,
        "switch_every_s": switch_every,
        "seed": seed,
        "keep": keep,
        "store_dir": store_dir,
    }

    def say(p: Mapping[str, Any]) -> None:
        if not env.as_json and "phase" in p:
            click.echo(f"loadtest: {p['phase']}", err=True)

    with contextlib.redirect_stdout(sys.stderr):
        joined = init_ray(address)
        try:
            doc = run_many(options, progress=say)
        finally:
            if joined:
                import ray

                ray.shutdown()
    if env.as_json:
        print_json(doc)
    else:
        m, a = doc["memory_mb"], doc["activation_ms"]
        click.echo(
            f"morphz loadtest {doc['run_id']} (hosted): {doc['contexts']} contexts on "
            f"{doc['hosts']} hosts, {doc['threads']} committers, {doc['seconds']} s\n"
            f"  commits {doc['committed']} ({doc['commits_per_s']}/s), unknown {doc['unknown']},"
            f" latency p50 {doc['latency_ms']['p50']:.1f} ms"
            f" p99 {doc['latency_ms']['p99']:.1f} ms\n"
            f"  activations {doc['activations']}, deactivations {doc['deactivations']},"
            f" most active at once {doc['active_max']}, refused {doc['refused']}\n"
            f"  activation in the host p50 {a['p50']} ms, p99 (worst host)"
            f" {a['p99_worst_host']} ms; a committer's first call on a context p50"
            f" {doc['first_call_ms']['p50']:.1f} ms p99 {doc['first_call_ms']['p99']:.1f} ms\n"
            f"  memory: hosts {m['hosts_base']} MB at start, {m['hosts_all_idle']} MB with every"
            f" context known and idle; per idle context {m['per_idle_context']} MB, per active"
            f" context {m['per_active_context']} MB\n"
            f"  history: {doc['contexts_checked']} contexts checked across"
            f" {doc['cycles_checked']} deactivate/activate cycles, "
            + ("ok" if doc["history_ok"] else f"VIOLATIONS {doc['violations']}")
        )
    if not doc["history_ok"]:
        sys.exit(EXIT_REFUSED)
