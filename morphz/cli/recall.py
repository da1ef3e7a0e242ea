"""The ``morphz recall`` and ``morphz graph`` commands (graph recall, R26-R27).

``recall`` prints one page of a recall request (``--json``: the page as one
JSON document); ``graph`` draws a frame's neighbourhood as Graphviz DOT, or
as SVG through the ``dot`` executable. Register them on the ``morphz`` group
with ``cli.add_command(recall_cmd)`` and ``cli.add_command(graph_cmd)``.
Neither imports Ray.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import click

from morphz.cli.console import Env, decode, emit, run_command
from morphz.cli.search import valid_at_option
from protocol.errors import RequestError
from protocol.state import TRUST

DOT_TIMEOUT = 60
"""Seconds the ``dot`` executable may take to lay out a graph."""


def _human_page(d: dict[str, Any]) -> str:
    lines = []
    for n in d["nodes"]:
        pad = "  " * n["depth"]
        if n["type"] == "frame":
            head = f"{pad}{n['id']}  r{n.get('revision', '?')}  {n['lifecycle']}"
            lines.append(head + ("  protected" if n.get("protected") else ""))
            if "body" in n:
                lines.append(f"{pad}  body: {n['body']}")
            if n.get("sources"):
                lines.append(f"{pad}  from: {' '.join(n['sources'])}")
        else:
            lines.append(f"{pad}{n['id']}  {n.get('kind', '?')}  {n['lifecycle']}")
            shown = n.get("text", n.get("preview", ""))
            lines.extend(f"{pad}  | {line}" for line in shown.splitlines()[:20])
    if d["edges"]:
        lines.append("edges:")
        lines.extend(f"  {e['from']} -{e['label']}-> {e['to']}" for e in d["edges"])
    lines.append(f"version {d['version']}")
    if d["next_cursor"] is not None:
        lines.append(f"next cursor: {d['next_cursor']}")
    if "observation" in d:
        lines.append(f"recorded as {d['observation']['ref']}")
    return "\n".join(lines)


@click.command("recall")
@click.argument("request_json")
@click.option("--cursor", default=None, help="Continue with the next_cursor of the previous page.")
@click.option(
    "--as-observation",
    is_flag=True,
    help="Also record the page as a recall_result observation and print its ref.",
)
@click.option(
    "--valid-at",
    callback=valid_at_option,
    default=None,
    metavar="TIME",
    help="Only frames whose valid time covers TIME (ISO-8601 or epoch seconds).",
)
@click.option(
    "--trust",
    "trusts",
    type=click.Choice(TRUST),
    multiple=True,
    help="Only frames of this trust status (repeatable).",
)
@click.pass_obj
@run_command
def recall_cmd(
    env: Env,
    request_json: str,
    cursor: str | None,
    as_observation: bool,
    valid_at: float | None,
    trusts: tuple[str, ...],
) -> None:
    """Recall the graph around a frame: REQUEST_JSON is a recall request ('-' for stdin).

    --valid-at and --trust set the request's valid_at and trust filters (a
    request that names them already is a usage error). Pass the same flags
    with --cursor: the cursor binds the filters. --as-observation records the
    page as the model would get it: without --trust, candidate and accepted
    frames only.

    Example: morphz --json recall '{"frame_id": "release-procedure", "depth": 2}'
    """
    from protocol.recall import RecallRequest

    if request_json == "-":
        request_json = decode(sys.stdin.buffer.read(), "the recall request")
    request = RecallRequest.parse(request_json)  # malformed JSON exits 2 before the store opens
    flags = {"valid_at": valid_at, "trust": trusts or None}
    given = {k: v for k, v in flags.items() if v is not None}
    if given:
        both = [k for k in given if getattr(request, k) is not None]
        if both:
            raise click.UsageError(
                f"the request already has {', '.join(both)}; give each filter once"
            )
        request = RecallRequest.parse({**request.model_dump(exclude_none=True), **given})
    if as_observation:
        # Recorded for the model: the model-facing path (trust default, extra["recalled"]).
        with env.open() as ctx:
            page, e = ctx.recall_recorded(request, cursor)
        doc = page.to_dict()
        doc["observation"] = {"ref": e.ref, "id": e.id}
    else:
        with env.read() as ctx:
            doc = ctx.recall(request, cursor).to_dict()
    emit(env, doc, _human_page)


def _dot_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def graph_dot(
    nodes: list[dict[str, Any]], edges: list[dict[str, str]], name: str = "recall"
) -> str:
    """Graphviz DOT text of recalled *nodes* and *edges*.

    Frames are boxes labelled with id, revision and lifecycle (retired ones
    dashed, the start frame bold); events are ellipses labelled with their
    reference and kind; edges carry their label (``source`` or the relation).
    """
    lines = [f"digraph {_dot_quote(name)} {{", "  node [fontname=Helvetica];"]
    lines.append("  edge [fontname=Helvetica, fontsize=10];")
    for n in nodes:
        attrs: list[str] = []
        if n["type"] == "frame":
            label = f"{n['id']}\nr{n.get('revision', '?')} {n['lifecycle']}"
            attrs.append("shape=box")
        else:
            label = f"{n['id']}\n{n.get('kind', '?')} {n['lifecycle']}"
            attrs.append("shape=ellipse")
        styles = []
        if n["lifecycle"] == "retired":
            styles.append("dashed")
        if n["depth"] == 0:
            styles.append("bold")
        if styles:
            attrs.append(f"style={_dot_quote(','.join(styles))}")
        attrs.append(f"label={_dot_quote(label)}")
        lines.append(f"  {_dot_quote(n['id'])} [{', '.join(attrs)}];")
    for e in edges:
        lines.append(
            f"  {_dot_quote(e['from'])} -> {_dot_quote(e['to'])} [label={_dot_quote(e['label'])}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_exe() -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise RequestError(
            "--format svg needs Graphviz: the `dot` executable was not found on PATH "
            "(install graphviz, or use --format dot)",
            code="graphviz_missing",
        )
    return exe


def _svg(dot_text: str, exe: str) -> str:
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise RequestError(f"running {exe} failed: {e}", code="graphviz_failed") from e
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip()[:500]
        raise RequestError(f"{exe} exited with {done.returncode}: {why}", code="graphviz_failed")
    return done.stdout.decode("utf-8", "replace")


@click.command("graph")
@click.argument("frame_id")
@click.option("--depth", type=int, default=2, show_default=True, help="Hops from FRAME_ID (0-4).")
@click.option(
    "--direction",
    type=click.Choice(["ancestors", "descendants", "both"]),
    default="ancestors",
    show_default=True,
)
@click.option(
    "--format", "fmt", type=click.Choice(["dot", "svg"]), default="dot", show_default=True
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write to FILE instead of stdout.",
)
@click.pass_obj
@run_command
def graph_cmd(
    env: Env, frame_id: str, depth: int, direction: str, fmt: str, output: str | None
) -> None:
    """Draw the neighbourhood of FRAME_ID as Graphviz DOT (or SVG, which needs `dot`)."""
    from protocol.recall import MAX_BYTES, MAX_NODES, RecallPage, RecallRequest, recall
    from protocol.view import ReadView

    request = RecallRequest.parse(
        {
            "frame_id": frame_id,
            "depth": depth,
            "direction": direction,
            "include_bodies": False,
            "include_events": False,
            "max_nodes": MAX_NODES,
            "max_bytes": MAX_BYTES,
        }
    )
    exe = _dot_exe() if fmt == "svg" else None  # refuse before the store is touched

    def everything(view: ReadView) -> tuple[list[RecallPage], int]:
        # All pages inside one snapshot, so no page can be stale.
        pages = [recall(view, request)]
        while pages[-1].next_cursor is not None:
            pages.append(recall(view, request, pages[-1].next_cursor))
        return pages, pages[0].version

    with env.read() as ctx:
        pages, version = ctx.backend.read(everything)
    nodes = [n for p in pages for n in p.nodes]
    edges = [e for p in pages for e in p.edges]
    text = graph_dot(nodes, edges, name=frame_id)
    if exe is not None:
        text = _svg(text, exe)
    doc: dict[str, Any] = {
        "id": frame_id,
        "format": fmt,
        "version": version,
        "nodes": len(nodes),
        "edges": len(edges),
        "output": output,
    }
    if output is not None:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise RequestError(f"cannot write {output}: {e}", code="bad_output") from e
        emit(
            env,
            doc,
            lambda d: (
                f"wrote {d['output']} ({d['format']}: {d['nodes']} nodes, {d['edges']} edges)"
            ),
        )
    elif env.as_json:
        emit(env, {**doc, "text": text}, str)
    else:
        click.echo(text, nl=False)
