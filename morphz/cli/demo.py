"""The ``morphz demo`` command: the seed stories, run at once by agent threads on Ray.

It starts a local Ray runtime (or joins ``--address`` / ``RAY_ADDRESS``), runs
:func:`harness.demo.run_demo` with a live table of the threads on stderr, then
prints the resulting graph and a summary (or, with ``--json``, one JSON
document on stdout). It writes the graph as Graphviz DOT (and SVG when the
``dot`` executable exists) beside the store. Exit 0 when every check of the
seeds' outcomes held, 1 otherwise. See docs/demo.md. Ray is imported only
when the command runs.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

import click

from morphz.cli.console import EXIT_REFUSED, Env, print_json, run_command


class _Live:
    """A rich Live table of the threads on stderr, fed by run_demo's progress callback."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(self._table({}), console=self.console, refresh_per_second=8)

    def _table(self, snap: Mapping[str, Any]) -> Any:
        from rich.table import Table

        table = Table(title="morphz demo: agent threads on one shared context")
        for col in ("thread", "steps", "commits", "rebased", "rejected", "deferred", "now"):
            table.add_column(col, justify="left" if col in ("thread", "now") else "right")
        for t in sorted(snap.get("threads", []), key=lambda t: str(t["thread"])):
            now = "finished" if t.get("finished") else str(t.get("action") or "")
            table.add_row(
                str(t["thread"]),
                str(t["steps"]),
                str(t["commits"]),
                str(t["rebased"]),
                f"[red]{t['rejected']}[/red]" if t["rejected"] else "0",
                str(t["deferred"]),
                now,
            )
        for ev in list(snap.get("events", []))[-6:]:
            if ev.get("rejected"):
                what = f"rejected ({', '.join(ev['rejected'])} on {', '.join(ev['conflicts'])})"
            elif ev.get("delivered"):
                what = f"reply delivered for {ev['delivered']}"
            else:
                what = "rebased onto a newer version"
            table.add_row("", "", "", "", "", "", f"[dim]{ev['thread']} step {ev['step']}: {what}")
        return table

    def update(self, snap: Mapping[str, Any]) -> None:
        self.live.update(self._table(snap))


def graph_of(doc: Mapping[str, Any]) -> str:
    """Graphviz DOT of the demo's resulting frames, their sources and relations."""
    from morphz.cli.recall import graph_dot

    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, str]] = []
    seen: set[str] = set()
    many = len(doc.get("groups", [])) > 1

    def key(ctx: str, ref: str) -> str:
        return f"{ctx}:{ref}" if many else ref

    for f in doc["frames"]:
        fid = key(f["context"], f["id"])
        seen.add(fid)
        nodes.append(
            {
                "type": "frame",
                "id": fid,
                "revision": f["revision"],
                "lifecycle": f["lifecycle"],
                "depth": 1,
            }
        )
    for f in doc["frames"]:
        for src in f["sources"]:
            sid = key(f["context"], src)
            if sid not in seen and src.startswith("@e"):
                seen.add(sid)
                nodes.append(
                    {"type": "event", "id": sid, "kind": "event", "lifecycle": "", "depth": 1}
                )
            edges.append({"from": key(f["context"], f["id"]), "to": sid, "label": "source"})
    for ctx, subject, label, obj in doc["relations"]:
        edges.append({"from": key(ctx, subject), "to": key(ctx, obj), "label": label})
    return graph_dot(nodes, edges, name="morphz-demo")


def _human(doc: Mapping[str, Any]) -> str:
    lines = []
    for g in doc["groups"]:
        lines.append(
            f"context {g['context']}: version {g['version']}, tick {g['tick']}, "
            f"{g['traces']} traced model calls"
        )
        for f in (f for f in doc["frames"] if f["context"] == g["context"]):
            lines.append(f"  {f['id']}  r{f['revision']}  {f['lifecycle']}")
            lines.append(f"    {f['body']}")
            if f["sources"]:
                lines.append(f"    from: {' '.join(f['sources'])}")
        rels = [r for r in doc["relations"] if r[0] == g["context"]]
        if rels:
            lines.append("  relations:")
            lines.extend(f"    {s} {lab} {o}" for _, s, lab, o in rels)
        for w in g.get("why", ()):
            lines.append(
                f"  why {w['frame']} (v{w['decisions'][0]['version']}, call {w['call']},"
                f" {w['thread']}): cited {' '.join(w['cited_frames'] + w['cited_events']) or '-'};"
                f" present but not cited {' '.join(w['present_not_cited']) or '-'}"
            )
    lines.append("checks:")
    lines.extend(f"  [{'ok' if v else 'FAILED'}] {k}" for k, v in doc["checks"].items())
    lines.append(f"graph (dot): {doc['dot']}")
    if doc.get("svg"):
        lines.append(f"graph (svg): {doc['svg']}")
    else:
        lines.append("graph (svg): needs Graphviz (`dot` not found on PATH)")
    lines.append(f"store: {doc['store']} (inspect with morphz --store … --context demo state)")
    lines.append(
        f"{doc['threads']} threads, {doc['steps']} model calls, {doc['commits']} commits, "
        f"{doc['rebased']} rebased, {doc['rejected']} rejected, {doc['deferred']} deferred "
        f"in {doc['seconds']} s — {'all checks held' if doc['ok'] else 'CHECKS FAILED'}"
    )
    return "\n".join(lines)


@click.command("demo")
@click.option("--threads", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--store",
    "store_dir",
    default=None,
    help="Store directory for the demo's contexts (default: a fresh temporary one).",
)
@click.option(
    "--address", default=None, help="Ray address to join (default: RAY_ADDRESS, else local)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--no-live", is_flag=True, help="No live table on stderr.")
@click.pass_obj
@run_command
def demo_cmd(
    env: Env, threads: int, store_dir: str | None, address: str | None, as_json: bool, no_live: bool
) -> None:
    """Run the seed stories at once: agent threads with scripted models on one shared context."""
    from harness.demo import run_demo, start_ray

    as_json = as_json or env.as_json
    live = None if (as_json or no_live or not sys.stderr.isatty()) else _Live()
    start_ray(address)
    if live is not None:
        with live.live:
            doc = run_demo(threads, store_dir, progress=live.update)
    else:
        doc = run_demo(threads, store_dir)
    dot_text = graph_of(doc)
    dot_path = os.path.join(doc["store"], "demo-graph.dot")
    with open(dot_path, "w", encoding="utf-8") as f:
        f.write(dot_text)
    doc["dot"] = dot_path
    doc["svg"] = None
    if shutil.which("dot") is not None:
        from morphz.cli.recall import _svg

        try:
            svg = _svg(dot_text, str(shutil.which("dot")))
            svg_path = os.path.join(doc["store"], "demo-graph.svg")
            with open(svg_path, "w", encoding="utf-8") as f:
                f.write(svg)
            doc["svg"] = svg_path
        except Exception:  # a drawing failure must not fail the demo
            doc["svg"] = None
    doc.pop("board", None)
    if as_json:
        print_json(doc)
    else:
        click.echo(_human(doc))
    if not doc["ok"]:
        sys.exit(EXIT_REFUSED)
