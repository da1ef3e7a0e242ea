"""The ``morphz`` command line.

Global options come before the command: ``--store DIR`` (env ``MORPHZ_STORE``,
default ``./.morphz``), ``--context NAME`` (default ``default``) and ``--json``
(one JSON document on stdout). Exit codes: 0 success; 1 a rejected transaction
or a refused request (unknown frame id or event ref included); 2 a usage or
parse error. Store commands never import Ray.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from morphz.cli.console import EXIT_REFUSED, EXIT_USAGE, Env, decode, emit, run_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    envvar="MORPHZ_STORE",
    default=".morphz",
    show_default=True,
    help="Store directory (env MORPHZ_STORE).",
)
@click.option("--context", "context_name", default="default", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.version_option(package_name="morphz")
@click.pass_context
def cli(ctx: click.Context, store: str, context_name: str, as_json: bool) -> None:
    """Morphz: structured, transactional memory for long-running agents."""
    ctx.obj = Env(store, context_name, as_json)


@cli.command()
@click.option("--window", type=int, default=None, help="Consolidation window in ticks (default 8).")
@click.pass_obj
@run_command
def init(env: Env, window: int | None) -> None:
    """Create the context (other commands create it on first use with defaults)."""
    from protocol.errors import RequestError
    from service.store import Store

    store = Store(env.store)
    existed = store.exists(env.context)
    with store.open(env.context, window=window) as ctx:
        meta = ctx.meta()
        if existed and window is not None and meta.window != window:
            raise RequestError(
                f"context {env.context!r} exists with window {meta.window}; "
                "the window is fixed at creation",
                code="exists",
            )
        doc = {
            "context": env.context,
            "store": env.store,
            "created": not existed,
            "window": meta.window,
            "version": meta.version,
            "tick": meta.tick,
        }
    emit(
        env,
        doc,
        lambda d: (
            f"context {d['context']}: window {d['window']} ticks, "
            f"version {d['version']}, tick {d['tick']}" + (" (created)" if d["created"] else "")
        ),
    )


@cli.command()
@click.option(
    "--kind",
    type=click.Choice(["user_message", "tool_result", "external", "recall_result"]),
    required=True,
)
@click.option("--session", default="main", show_default=True)
@click.option("--text", default=None, help="The observation's text.")
@click.option(
    "--file",
    "path",
    type=click.File("rb"),
    default=None,
    help="Read the text from a file ('-' for stdin).",
)
@click.pass_obj
@run_command
def observe(env: Env, kind: str, session: str, text: str | None, path: Any) -> None:
    """Record an observation; it waits until claimed."""
    if (text is None) == (path is None):
        raise click.UsageError("give exactly one of --text or --file")
    body = text if text is not None else decode(path.read(), "the observation file")
    with env.open() as ctx:
        e = ctx.observe(kind, body, session=session)
    doc = {"ref": e.ref, "id": e.id, "kind": e.kind, "session": e.session, "size": e.size}
    emit(env, doc, lambda d: f"{d['ref']}  {d['kind']}  ({d['size']} chars)  {d['id']}")


@cli.command()
@click.pass_obj
@run_command
def claim(env: Env) -> None:
    """Claim all waiting inputs as one batch (advances the tick once)."""
    with env.open() as ctx:
        result = ctx.claim()
    emit(
        env,
        result.to_dict(),
        lambda d: (
            f"tick {d['tick']}: claimed {' '.join(d['claimed']) or 'nothing'}"
            + (f"; finalized {' '.join(d['finalized'])}" if d["finalized"] else "")
        ),
    )


def _human_receipt(d: dict[str, Any]) -> str:
    lines = [
        f"{d['status']} at version {d['version']} (base {d['base_version']}"
        + (", rebased" if d["rebased"] else "")
        + (", duplicate" if d.get("duplicate") else "")
        + ")"
    ]
    if d["retired_now"]:
        lines.append("retired now: " + " ".join(d["retired_now"]))
    for r in d["retiring"]:
        lines.append(f"retiring: {r['id']} due at tick {r['due_tick']}")
    if d["retirement_cancelled"]:
        lines.append("retirement cancelled: " + " ".join(d["retirement_cancelled"]))
    if d["restored"]:
        lines.append("restored: " + " ".join(d["restored"]))
    if d["status"] == "committed":
        lines.append(
            f"relief: {d['relief_now']['tokens']} tokens now, "
            f"{d['relief_pending']['tokens']} pending after the window"
        )
    for e in d["errors"]:
        where = f"op {e['op']}" if e["op"] is not None else "transaction"
        lines.append(f"error ({where}) {e['code']}: {e['message']}")
    for c in d["conflicts"]:
        lines.append(f"conflict: {c['id']} changed at version {c['version']}")
    return "\n".join(lines)


@cli.command()
@click.argument("source", type=click.File("rb"), default="-")
@click.option(
    "--client-id", default=None, help="Idempotency key: a retry returns the original receipt."
)
@click.pass_obj
@run_command
def tx(env: Env, source: Any, client_id: str | None) -> None:
    """Submit a (context-tx …) from FILE or stdin and print its receipt."""
    from protocol.txlang import parse_tx
    from protocol.wire import SubmittedTx

    text = decode(source.read(), "the transaction")
    # Parsed once, here: a parse error exits 2 before the store is touched, and the
    # service commits the parsed form and logs the text as given.
    submitted = SubmittedTx(parse_tx(text), text)
    with env.open() as ctx:
        receipt = ctx.commit_many([(submitted, client_id)])[0]
    doc = receipt.to_dict()
    emit(env, doc, _human_receipt)
    if not receipt.committed:
        sys.exit(EXIT_REFUSED)


def _human_frame(d: dict[str, Any]) -> str:
    head = f"{d['id']}  r{d['revision']}  {d['lifecycle']}" + (
        "  protected" if d["protected"] else ""
    )
    if d["lifecycle"] == "retiring":
        head += f"  (due at tick {d['due_tick']})"
    lines = [head, f"  body: {d['body']}"]
    if d["sources"]:
        lines.append("  from: " + " ".join(d["sources"]))
    for s, lab, o in d["relations_out"] + d["relations_in"]:
        lines.append(f"  {s} {lab} {o}")
    return "\n".join(lines)


@cli.command()
@click.argument("frame_id")
@click.pass_obj
@run_command
def frame(env: Env, frame_id: str) -> None:
    """Show the current frame FRAME_ID."""
    with env.read() as ctx:
        doc = ctx.frame(frame_id)
    emit(env, doc, _human_frame)


@cli.command()
@click.argument("ref")
@click.option("--offset", type=int, default=0, show_default=True)
@click.option(
    "--length", type=int, default=None, help="Characters to read (default: the rest, ≤ 1 MiB)."
)
@click.pass_obj
@run_command
def event(env: Env, ref: str, offset: int, length: int | None) -> None:
    """Read an observation (retired ones too) by reference, in chunks."""
    with env.read() as ctx:
        meta = ctx.event(ref)
        chunk = ctx.read_event(ref, offset, length)
    doc = {**meta, **chunk}
    doc.pop("preview", None)
    emit(env, doc, lambda d: d["text"])


def _human_state(d: dict[str, Any]) -> str:
    lines = [
        f"context {d['context']}: version {d['version']}, tick {d['tick']}, window {d['window']}"
    ]
    lines.append(f"frames ({len(d['frames'])}):")
    for f in d["frames"]:
        extra = f" due {f['due_tick']}" if "due_tick" in f else ""
        lines.append(f"  {f['id']}  r{f['revision']}  {f['lifecycle']}{extra}")
    lines.append(f"events ({len(d['events'])}):")
    for e in d["events"]:
        lines.append(f"  {e['ref']}  {e['kind']}  {e['lifecycle']}")
    lines.append(f"relations ({len(d['relations'])}):")
    for s, lab, o in d["relations"]:
        lines.append(f"  {s} {lab} {o}")
    return "\n".join(lines)


@cli.command()
@click.pass_obj
@run_command
def state(env: Env) -> None:
    """Version, tick, frames, events and relations of the context."""
    with env.read() as ctx:
        doc = ctx.state()
    emit(env, doc, _human_state)


@cli.command()
@click.argument("ref")
@click.pass_obj
@run_command
def deliver(env: Env, ref: str) -> None:
    """Mark the user request REF delivered; it may be retired afterwards."""
    with env.open() as ctx:
        doc = ctx.deliver(ref)
    emit(env, doc, lambda d: f"{d['ref']} delivered")


@cli.command()
@click.argument("frame_id")
@click.pass_obj
@run_command
def history(env: Env, frame_id: str) -> None:
    """Every committed write of FRAME_ID, with the body each wrote (R29)."""
    with env.read() as ctx:
        items = ctx.history(frame_id)
    doc = {"id": frame_id, "writes": items}
    emit(
        env,
        doc,
        lambda d: "\n".join(
            f"v{w['version']} (base {w['base_version']}) {w['op']}"
            + (f" r{w['revision']}" if "revision" in w else "")
            + (f": {w['body']}" if "body" in w else "")
            for w in d["writes"]
        ),
    )


@cli.command("log")
@click.argument("version", type=int)
@click.pass_obj
@run_command
def log_cmd(env: Env, version: int) -> None:
    """The transaction committed at VERSION, as logged (text, base, client id, receipt)."""
    with env.read() as ctx:
        doc = ctx.txlog(version)
    emit(env, doc, lambda d: d["text"])


@cli.command()
@click.option(
    "--frame",
    "frame_id",
    default=None,
    help="Only calls where this frame was present, retrieved or cited.",
)
@click.option(
    "--decision",
    "version",
    type=int,
    default=None,
    help="Which memories influenced the transaction committed at this version.",
)
@click.option(
    "--call", "call", type=int, default=None, help="Which memories influenced this traced call."
)
@click.option("--after", type=int, default=0, show_default=True)
@click.option("--limit", type=int, default=1000, show_default=True)
@click.pass_obj
@run_command
def trace(
    env: Env,
    frame_id: str | None,
    version: int | None,
    call: int | None,
    after: int,
    limit: int,
) -> None:
    """Usage traces of model calls (R42): what each call saw, retrieved and cited.

    With --decision or --call: which memories influenced that decision.
    """
    if version is not None or call is not None:
        if frame_id is not None:
            raise click.UsageError(
                "--frame lists calls; it does not combine with --decision or --call"
            )
        with env.read() as ctx:
            doc = ctx.influence(version=version, call=call)
        emit(env, doc, _influence_text)
        return
    with env.read() as ctx:
        calls = ctx.traces(frame=frame_id, after=after, limit=limit)
    emit(env, {"calls": calls}, _calls_text)


def _calls_text(doc: dict[str, Any]) -> str:
    lines = []
    for c in doc["calls"]:
        head = f"call {c['call']} v{c.get('version')} {c.get('session', '')}"
        if c.get("roles"):
            head += f" ({', '.join(c['roles'])})"
        lines.append(head + ": " + " ".join(c.get("frames_present", [])))
        cited = c.get("cited") or []
        if cited:
            lines.append("  cited: " + " ".join(cited))
    return "\n".join(lines) or "no traced calls"


def _influence_text(doc: dict[str, Any]) -> str:
    if doc["traced"]:
        who = doc.get("thread") or doc.get("session")
        where = f"call {doc['call']} ({who}, input v{doc['version']})"
    else:
        where = "no traced model call (from the log alone)"
    lines = [f"decision: {where}"]
    for d in doc["decisions"]:
        what = " ".join(d.get("writes") or []) or d.get("kind", "")
        lines.append(f"  committed v{d['version']}: {what}")
    if doc.get("action"):
        outcome = f" -> {doc['outcome']}" if doc.get("outcome") else ""
        lines.append(f"  action: {doc['action']}{outcome}")

    def row(name: str, items: list[str]) -> None:
        lines.append(f"{name:<22} {' '.join(items) if items else '-'}")

    row("cited frames:", doc["cited_frames"])
    row("cited observations:", doc["cited_events"])
    if doc["traced"]:
        row("retrieved, adopted:", doc["retrieved_adopted"])
        row("retrieved, not adopted:", doc["retrieved_not_adopted"])
        row("present, not cited:", doc["present_not_cited"])
    return "\n".join(lines)


@cli.command()
@click.argument("new_context")
@click.option("--at-version", type=int, default=None, help="Fork as of this version.")
@click.pass_obj
@run_command
def fork(env: Env, new_context: str, at_version: int | None) -> None:
    """Fork this context into NEW_CONTEXT as of a version, for new tasks to start from."""
    from protocol.errors import RequestError
    from service.fork import fork_into
    from service.store import Store

    store = Store(env.store)
    if store.exists(new_context):
        raise RequestError(f"context {new_context!r} already exists", code="exists")
    with env.read() as source, store.open(new_context) as target:
        doc = fork_into(source.backend, target.backend, at_version=at_version, origin=env.context)
    doc["context"] = new_context
    emit(env, doc, lambda d: f"{d['context']}: forked from {d['origin']} at version {d['version']}")


from morphz.cli.demo import demo_cmd  # noqa: E402
from morphz.cli.loadtest import loadtest_cmd  # noqa: E402
from morphz.cli.recall import graph_cmd, recall_cmd  # noqa: E402
from morphz.cli.review import audit_cmd, review_cmd  # noqa: E402
from morphz.cli.search import import_cmd, reindex_cmd, search_cmd  # noqa: E402

cli.add_command(recall_cmd)
cli.add_command(graph_cmd)
cli.add_command(loadtest_cmd)
cli.add_command(demo_cmd)
cli.add_command(search_cmd)
cli.add_command(reindex_cmd)
cli.add_command(import_cmd)
cli.add_command(review_cmd)
cli.add_command(audit_cmd)


def main() -> None:
    """Entry point of the ``morphz`` command."""
    try:
        cli.main(standalone_mode=False, prog_name="morphz")
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
