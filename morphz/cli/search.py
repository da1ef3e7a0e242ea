"""``morphz search``, ``morphz reindex`` and ``morphz import`` (R30).

Register them on the ``morphz`` group with ``cli.add_command(search_cmd)``,
``cli.add_command(reindex_cmd)`` and ``cli.add_command(import_cmd)`` (or loop
over :data:`COMMANDS`). None imports Ray; each reaches the index through the
context's searcher (:attr:`service.Context.searcher`), closed with the context.

A one-shot CLI has no background index worker, so ``search`` first applies the
pending index intents itself (``--no-catch-up`` skips that and shows the lag).
With an embedder (``--embed-url``/``--embed-model`` or ``MORPHZ_EMBED_*``) search
is hybrid and catching up embeds what is pending too; ``reindex`` rebuilds the
vectors as well (docs/search.md, "Hybrid search").
``search`` and ``reindex`` open the context for writing so they can
acknowledge applied intents; if another process holds the writer lock, they
fall back to a read-only open (the index is updated, the outbox is left for
the writer to acknowledge).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import click

from morphz.cli.console import Env, decode, emit, run_command
from protocol.errors import ParseError, RequestError, StoreLocked, WireError
from protocol.state import EVENT_KINDS, TRUST
from protocol.wire import json_document

KINDS = ("frame", *EVENT_KINDS)
LIFECYCLES = ("active", "retiring", "retired")
IMPORT_BATCH = 1000
MAX_SESSION = 128
MAX_TEXT_CHARS = 64 << 20


def parse_time(value: Any) -> float:
    """Seconds since the epoch from a number, a numeric string or ISO-8601 (naive = UTC)."""
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                when = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(f"not ISO-8601 or seconds since the epoch: {value!r}") from None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = when.timestamp()
    else:
        raise ValueError(f"not a time: {value!r}")
    if math.isnan(seconds) or not 0 <= seconds < 1e11:
        raise ValueError(f"time out of range: {value!r}")
    return seconds


def _time_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from e


def valid_at_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A click callback for ``--valid-at``: epoch seconds from a number or an ISO date/date-time.

    Numeric text is epoch seconds; other text is parsed like the envelope's
    valid times (:func:`protocol.recall.valid_at_seconds`). A bad value is a
    usage error (exit 2) naming the option.
    """
    if value is None:
        return None
    from protocol.recall import valid_at_seconds

    text = value.strip()
    try:
        number: float | None = float(text)
    except ValueError:
        number = None
    try:
        return valid_at_seconds(text if number is None else number, name="")
    except RequestError as e:
        raise click.BadParameter(e.message, ctx=ctx, param=param) from e


def embedder_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback for ``--embed-url``/``--embed-model``: a non-empty string."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty", ctx=ctx, param=param)
    return value


def embedder_config(url: str | None, model: str | None) -> Any:
    """The embedder of ``--embed-url``/``--embed-model`` over the ``MORPHZ_EMBED_*``
    variables (the flags win), or None when neither names one: search stays lexical.

    A bad value is a usage error (exit 2) naming the flag or variable.
    """
    import os

    from adapters.embeddings import EmbedderConfig
    from adapters.embeddings.base import ENV_MODEL, ENV_URL

    env = dict(os.environ)
    if url is not None:
        env[ENV_URL] = url
    if model is not None:
        env[ENV_MODEL] = model
    try:
        return EmbedderConfig.from_env(env)
    except RequestError as e:
        hint = "--embed-url/--embed-model (or MORPHZ_EMBED_*)"
        raise click.BadParameter(e.message, param_hint=hint) from e


def _embed_options(fn: Any) -> Any:
    fn = click.option(
        "--embed-model",
        callback=embedder_option,
        default=None,
        metavar="NAME",
        help="Embedding model: hybrid search (env MORPHZ_EMBED_MODEL).",
    )(fn)
    return click.option(
        "--embed-url",
        callback=embedder_option,
        default=None,
        metavar="URL",
        help="OpenAI-compatible embeddings API root, e.g. http://localhost:8000/v1"
        " (env MORPHZ_EMBED_URL).",
    )(fn)


def _open_context(env: Env) -> Any:
    """The context, for writing if possible (to catch the index up), else read-only beside
    the process that writes it. Never creates it: a missing context is ``not_found``."""
    from service.store import Store

    store = Store(env.store)
    try:
        return store.open(env.context, create=False)
    except StoreLocked:
        return store.open(env.context, readonly=True)


def _human_search(d: dict[str, Any]) -> str:
    lag = f", {d['lag']} intents behind" if d.get("lag") else ""
    lines = [
        f"{len(d['hits'])} hits; context version {d['version']}, "
        f"indexed version {d['indexed_version']}{lag}"
    ]
    sem = d.get("semantic")
    if sem is not None:
        if sem["degraded"]:
            lines.append(f"semantic search unavailable ({sem['degraded']}): keyword hits only")
        else:
            behind = f", {sem['lag']} intents not embedded" if sem["lag"] else ""
            lines.append(
                f"hybrid with {sem['model']}, vectors at version {sem['indexed_version']}{behind}"
            )
    for h in d["hits"]:
        trust = f"  {h['trust']}" if "trust" in h else ""
        found = "".join(f"  {s['name']}#{s['rank']}" for s in h.get("signals", ()))
        score = f"{h['score']:8.4f}" if sem is not None else f"{h['score']:8.3f}"
        lines.append(f"{score}  {h['id']}  {h['kind']}  {h['lifecycle']}{trust}{found}")
        lines.append(f"          {h['snippet']}")
    return "\n".join(lines)


@click.command("search")
@click.argument("query")
@click.option(
    "--since",
    callback=_time_option,
    default=None,
    metavar="TIME",
    help="ISO-8601 or epoch seconds (inclusive).",
)
@click.option(
    "--until",
    callback=_time_option,
    default=None,
    metavar="TIME",
    help="ISO-8601 or epoch seconds (inclusive).",
)
@click.option("--kind", "kinds", type=click.Choice(KINDS), multiple=True, help="Repeatable.")
@click.option("--lifecycle", type=click.Choice(LIFECYCLES), default=None)
@click.option("--prefix", "id_prefix", default=None, help="Frame id (or @eN) prefix.")
@click.option(
    "--trust",
    "trusts",
    type=click.Choice(TRUST),
    multiple=True,
    help="Frames of this trust status only (repeatable); events always pass.",
)
@click.option(
    "--valid-at",
    callback=valid_at_option,
    default=None,
    metavar="TIME",
    help="Frames whose valid time covers TIME (ISO-8601 or epoch seconds); events pass.",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--no-catch-up", is_flag=True, help="Search the index as it is (may lag).")
@_embed_options
@click.option(
    "--include-recalls",
    is_flag=True,
    help="Also search the recall_result observations that record earlier searches and"
    " recalls (left out by default: each would match its own query again).",
)
@click.pass_obj
@run_command
def search_cmd(
    env: Env,
    query: str,
    since: float | None,
    until: float | None,
    kinds: tuple[str, ...],
    lifecycle: str | None,
    id_prefix: str | None,
    trusts: tuple[str, ...],
    valid_at: float | None,
    limit: int,
    no_catch_up: bool,
    embed_url: str | None,
    embed_model: str | None,
    include_recalls: bool,
) -> None:
    """Search frames and events, retired ones included: by keywords, and by meaning too
    when an embedder is configured (--embed-url/--embed-model or MORPHZ_EMBED_*)."""
    if since is not None and until is not None and since > until:
        raise click.BadParameter("--since is after --until", param_hint="--since")
    embedder = embedder_config(embed_url, embed_model)
    with _open_context(env) as ctx:
        if embedder is not None:
            ctx.use_embedder(embedder)
        searcher = ctx.searcher  # the context's indexes; closed with the context
        if not no_catch_up:
            searcher.catch_up()
        result = searcher.find(
            query,
            limit=limit,
            since=since,
            until=until,
            kinds=kinds or (None if include_recalls else UNRECORDED_KINDS),
            lifecycle=lifecycle,
            id_prefix=id_prefix,
            trust=trusts or None,
            valid_at=valid_at,
        )
    emit(env, result.to_dict(), _human_search)


UNRECORDED_KINDS = tuple(k for k in KINDS if k != "recall_result")
"""What ``morphz search`` covers unless --kind or --include-recalls says otherwise."""


def _human_reindex(d: dict[str, Any]) -> str:
    text = (
        f"indexed {d['documents']} documents at version {d['indexed_version']} in {d['seconds']} s"
    )
    v = d.get("vectors")
    if v is not None:
        text += (
            f"\nembedded {v['documents']} documents with {v['model']} at version "
            f"{v['indexed_version']} in {v['seconds']} s"
        )
    return text


@click.command("reindex")
@_embed_options
@click.pass_obj
@run_command
def reindex_cmd(env: Env, embed_url: str | None, embed_model: str | None) -> None:
    """Drop the search index and rebuild it from the durable records (with an embedder,
    the vectors too: everything is embedded again)."""
    embedder = embedder_config(embed_url, embed_model)
    with _open_context(env) as ctx:
        if embedder is not None:
            ctx.use_embedder(embedder)
        doc = ctx.searcher.reindex()
    emit(env, doc, _human_reindex)


def _bad_line(number: int, message: str) -> ParseError:
    err = ParseError(f"line {number}: {message}")
    err.line = number
    return err


def parse_observations(data: str) -> list[tuple[str, str, str, float | None]]:
    """Validate every JSON Lines record; blank lines are skipped. ParseError names the line."""
    out: list[tuple[str, str, str, float | None]] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json_document(line)  # the wire's JSON rules: no duplicate key, no NaN
        except WireError as e:
            raise _bad_line(number, f"invalid JSON ({e.message})") from e
        if not isinstance(rec, dict):
            raise _bad_line(number, "each line is one JSON object")
        unknown = sorted(set(rec) - {"kind", "text", "session", "time"})
        if unknown:
            raise _bad_line(number, f"unknown field {', '.join(unknown)}")
        kind = rec.get("kind")
        if kind not in EVENT_KINDS:
            raise _bad_line(number, f"unknown kind {kind!r}; use one of {', '.join(EVENT_KINDS)}")
        text = rec.get("text")
        if not isinstance(text, str):
            raise _bad_line(number, "missing text (a string)")
        if len(text) > MAX_TEXT_CHARS:
            raise _bad_line(number, f"text longer than {MAX_TEXT_CHARS} characters")
        session = rec.get("session", "main")
        if (
            not isinstance(session, str)
            or not session
            or len(session) > MAX_SESSION
            or not session.isprintable()
        ):
            raise _bad_line(number, "a session is 1 to 128 printable characters")
        when: float | None = None
        if rec.get("time") is not None:
            try:
                when = parse_time(rec["time"])
            except ValueError as e:
                raise _bad_line(number, str(e)) from e
        out.append((kind, text, session, when))
    return out


@click.command("import")
@click.argument("source", type=click.File("rb"))
@click.option(
    "--batch",
    type=click.IntRange(1, 100_000),
    default=IMPORT_BATCH,
    show_default=True,
    help="Observations per durable write.",
)
@click.option("--create", is_flag=True, help="Create the context if it does not exist.")
@click.pass_obj
@run_command
def import_cmd(env: Env, source: Any, batch: int, create: bool) -> None:
    """Record observations from a JSON Lines FILE ('-' for stdin), in line order.

    Each line: {"kind": …, "text": …, "session": optional, "time": ISO-8601 or
    epoch seconds, optional}. Every line is checked before anything is recorded.
    """
    items = parse_observations(decode(source.read(), "the import file"))
    refs: list[str] = []
    with env.open(create=create) as ctx:
        for i in range(0, len(items), batch):
            chunk = [
                {"kind": k, "text": t, "session": s, "time": at}
                for k, t, s, at in items[i : i + batch]
            ]
            refs.extend(e.ref for e in ctx.observe_many(chunk))
    doc = {"imported": len(refs), "refs": refs}
    emit(
        env,
        doc,
        lambda d: (
            f"imported {d['imported']} observations"
            + (f" ({d['refs'][0]} … {d['refs'][-1]})" if d["refs"] else "")
        ),
    )


COMMANDS = (search_cmd, reindex_cmd, import_cmd)
"""The commands to register on :data:`morphz.cli.cli`."""
