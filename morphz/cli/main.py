"""The ``morphz`` command line.

Global options go before or after the command: ``--store DIR`` (env
``MORPHZ_STORE``, default ``./.morphz``), ``--context NAME`` (default
``default``) and ``--json`` (one JSON document on stdout). Reads never create:
a missing store or context is ``not_found``; a context is created by ``init``
or by a write given ``--create``. Exit codes (``docs/cli.md``): 0 success; 1
refused, rejected, not found, locked or unreachable; 2 usage or malformed
input; 130 interrupted. With ``--json`` every error is one JSON object
``{"error": {"code", "message"}}`` on stdout. Store commands never import Ray.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from morphz.cli.console import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_USAGE,
    Env,
    decode,
    emit,
    report_error,
    results_only_on_stdout,
    run_command,
)
from morphz.cli.target import address_option, writer_for

GLOBAL_OPTIONS = {"--store": "store", "--context": "context", "--json": "as_json"}
"""The global options every command also accepts after its name, and the Env field each sets."""


def _late_global(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A global option given after the command: it overrides the one given before."""
    if value is None or value is False:
        return value
    env = ctx.find_object(Env)
    if env is not None and param.name is not None:
        setattr(env, param.name, value)
    return value


def _accept_global_options(cmd: click.Command) -> None:
    """Let *cmd* (and, for a group, its commands) take the global options after its name.

    A command that defines an option of the same name itself (``demo --store``)
    keeps its own.
    """
    taken = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
    for flag, field in GLOBAL_OPTIONS.items():
        if flag in taken:
            continue
        is_flag = field == "as_json"
        cmd.params.append(
            click.Option(
                [flag, field],
                is_flag=is_flag,
                default=False if is_flag else None,
                expose_value=False,
                hidden=True,
                callback=_late_global,
            )
        )
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _accept_global_options(sub)


class MorphzGroup(click.Group):
    """The ``morphz`` group: every command registered on it accepts the global options
    after its name too (``morphz state --json``)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _accept_global_options(cmd)
        super().add_command(cmd, name)


@click.group(cls=MorphzGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    """Morphz: structured, transactional memory for long-running agents.

    --store, --context and --json may also follow the command. Reads never
    create a context: use init (or --create on a write). Exit codes: 0 ok,
    1 refused/not found/locked, 2 usage or malformed input, 130 interrupted.
    """
    ctx.obj = Env(store, context_name, as_json)


@cli.command()
@click.option("--window", type=int, default=None, help="Consolidation window in ticks (default 8).")
@click.pass_obj
@run_command
def init(env: Env, window: int | None) -> None:
    """Create the context (reads never create one; writes only with --create)."""
    from protocol.errors import RequestError
    from service.store import Store

    store = Store(env.store)
    existed = store.exists(env.context)
    with store.open(env.context, window=window, create=True) as ctx:
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
@click.option("--create", is_flag=True, help="Create the context if it does not exist.")
@address_option
@click.pass_obj
@run_command
def observe(
    env: Env,
    kind: str,
    session: str,
    text: str | None,
    path: Any,
    create: bool,
    address: str | None,
) -> None:
    """Record an observation; it waits until claimed."""
    if (text is None) == (path is None):
        raise click.UsageError("give exactly one of --text or --file")
    body = text if text is not None else decode(path.read(), "the observation file")
    with writer_for(env, address, create=create) as writer:
        doc = writer.observe(kind, body, session)
    emit(env, doc, lambda d: f"{d['ref']}  {d['kind']}  ({d['size']} chars)  {d['id']}")


@cli.command()
@address_option
@click.pass_obj
@run_command
def claim(env: Env, address: str | None) -> None:
    """Claim all waiting inputs as one batch (advances the tick once)."""
    with writer_for(env, address) as writer:
        result = writer.claim()
    emit(
        env,
        result,
        lambda d: (
            f"tick {d['tick']}: claimed {' '.join(d['claimed']) or 'nothing'}"
            + (f"; finalized {' '.join(d['finalized'])}" if d["finalized"] else "")
        ),
    )


def _human_receipt(d: dict[str, Any]) -> str:
    lines = [
        f"{d['status']} at version {d['version']} (base {d['base_version']}"
        + (", rebased" if d["rebased"] and d["status"] == "committed" else "")
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
@click.option(
    "--check",
    is_flag=True,
    help="Print the receipt the transaction would get now; write nothing (read-only).",
)
@click.option("--create", is_flag=True, help="Create the context if it does not exist.")
@address_option
@click.pass_obj
@run_command
def tx(
    env: Env,
    source: Any,
    client_id: str | None,
    check: bool,
    create: bool,
    address: str | None,
) -> None:
    """Submit a (context-tx …) from FILE or stdin and print its receipt.

    With --check: evaluate it against the current state and print the receipt
    it would get, writing nothing (exit 1 if it would be rejected).
    """
    from protocol.txlang import parse_tx
    from protocol.txwire import SubmittedTx

    text = decode(source.read(), "the transaction")
    # Parsed once, here: a parse error exits 2 before the store is touched, and the
    # service commits the parsed form and logs the text as given.
    submitted = SubmittedTx(parse_tx(text), text)
    _check_log_refs(env, text)
    if check:
        if create:
            raise click.UsageError("--check writes nothing; it does not combine with --create")
        with env.read() as ctx:
            would = ctx.check(submitted, client_id=client_id)
        emit(env, {**would.to_dict(), "check": True}, _human_check)
        if not would.committed:
            sys.exit(EXIT_REFUSED)
        return
    with writer_for(env, address, create=create) as writer:
        receipt = writer.commit(submitted, client_id)
    doc = receipt.to_dict()
    emit(env, doc, _human_receipt)
    if not receipt.committed:
        sys.exit(EXIT_REFUSED)


def _check_log_refs(env: Env, text: str) -> None:
    """Refuse a transaction copied from another context's log whose event references
    name other observations here (:mod:`morphz.cli.logrefs`)."""
    from morphz.cli.logrefs import check_refs, parse_header
    from protocol.errors import NotFound

    if parse_header(text) is None:
        return
    try:
        ctx = env.read()
    except NotFound:  # a context made by this very write (--create) has no observation
        return
    with ctx:
        check_refs(text, env.context, ctx)


def _human_check(d: dict[str, Any]) -> str:
    return "would be " + _human_receipt(d) + "\nchecked only: nothing written"


def _human_frame(d: dict[str, Any]) -> str:
    head = f"{d['id']}  r{d['revision']}  {d['lifecycle']}" + (
        "  protected" if d["protected"] else ""
    )
    if d["lifecycle"] == "retiring":
        head += f"  (due at tick {d['due_tick']})"
    lines = [head, f"  body: {d['body']}"]
    if d["sources"]:
        gone = set(d.get("forgotten_sources") or ())
        lines.append("  from: " + " ".join(s + " (forgotten)" * (s in gone) for s in d["sources"]))
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
@click.option("--at", "at", default=None, help="As of this version or tag (docs/branches.md).")
@click.pass_obj
@run_command
def state(env: Env, at: str | None) -> None:
    """Version, tick, frames, events and relations of the context (now, or --at)."""
    with env.read() as ctx:
        doc = ctx.state() if at is None else ctx.state_at(int(at) if at.isdigit() else at)
    emit(env, doc, _human_state)


@cli.command()
@click.argument("ref")
@address_option
@click.pass_obj
@run_command
def deliver(env: Env, ref: str, address: str | None) -> None:
    """Mark the user request REF delivered; it may be retired afterwards."""
    with writer_for(env, address) as writer:
        doc = writer.deliver(ref)
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
    from morphz.cli.logrefs import event_refs, header
    from protocol.txlang import parse_tx

    with env.read() as ctx:
        doc = dict(ctx.txlog(version))
        refs = event_refs(parse_tx(doc["text"])) if doc.get("text") else []
        doc["event_ids"] = {ref: str(ctx.event(ref)["id"]) for ref in refs}
    line = header(env.context, version, doc["event_ids"])
    emit(env, doc, lambda d: f"{line}\n{d['text']}" if line else d["text"])


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


from morphz.cli.actors import actors_cmd, stop_cmd  # noqa: E402
from morphz.cli.branches import BRANCH_COMMANDS  # noqa: E402
from morphz.cli.contexts import contexts_cmd, drop_cmd  # noqa: E402
from morphz.cli.demo import demo_cmd  # noqa: E402
from morphz.cli.forget import compact_cmd, forget_cmd  # noqa: E402
from morphz.cli.grant import grant_cmd  # noqa: E402
from morphz.cli.inspect import inspect_cmd  # noqa: E402
from morphz.cli.loadtest import loadtest_cmd  # noqa: E402
from morphz.cli.mcp import mcp_cmd  # noqa: E402
from morphz.cli.recall import graph_cmd, recall_cmd  # noqa: E402
from morphz.cli.review import audit_cmd, review_cmd  # noqa: E402
from morphz.cli.search import import_cmd, reindex_cmd, search_cmd  # noqa: E402
from morphz.cli.serve import serve_cmd  # noqa: E402
from morphz.cli.top import top_cmd  # noqa: E402

for _cmd in BRANCH_COMMANDS:
    cli.add_command(_cmd)
cli.add_command(contexts_cmd)
cli.add_command(actors_cmd)
cli.add_command(stop_cmd)
cli.add_command(drop_cmd)
cli.add_command(recall_cmd)
cli.add_command(graph_cmd)
cli.add_command(loadtest_cmd)
cli.add_command(demo_cmd)
cli.add_command(search_cmd)
cli.add_command(reindex_cmd)
cli.add_command(import_cmd)
cli.add_command(review_cmd)
cli.add_command(audit_cmd)
cli.add_command(grant_cmd)
cli.add_command(forget_cmd)
cli.add_command(compact_cmd)
cli.add_command(top_cmd)
cli.add_command(inspect_cmd)
cli.add_command(mcp_cmd)
cli.add_command(serve_cmd)


def _wants_json(argv: list[str]) -> bool:
    """``--json`` anywhere on the command line (before a ``--``), for errors click raises
    before any command has run."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``morphz`` command: one exit-code contract for every command.

    0 success; 1 refused, rejected, not found, locked, unreachable; 2 usage or
    malformed input; 130 interrupted (SIGINT). With ``--json`` a usage error is
    one JSON object ``{"error": {"code": "usage_error", "message"}}`` on stdout.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = _wants_json(args)
    try:
        with results_only_on_stdout(as_json):
            cli.main(args=args, standalone_mode=False, prog_name="morphz")
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        report_error(as_json, "interrupted", "interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except click.Abort as e:
        if isinstance(e.__cause__ or e.__context__, KeyboardInterrupt):
            report_error(as_json, "interrupted", "interrupted")
            sys.exit(EXIT_INTERRUPTED)
        report_error(as_json, "aborted", "aborted: no answer")
        sys.exit(EXIT_REFUSED)
    except click.ClickException as e:
        if as_json:
            code = "usage_error" if isinstance(e, click.UsageError) else "bad_file"
            report_error(True, code, e.format_message())
        else:
            e.show()
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
