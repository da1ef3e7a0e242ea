"""``morphz fork``, ``diff``, ``merge``, ``pick``, ``tag``, ``revert`` (docs/branches.md).

Read from the target's side, as git does: ``morphz --context main diff alt``
compares ``main`` (ours) with ``alt`` (theirs); ``merge alt`` brings ``alt``'s
work into ``main``. The writes go through :func:`morphz.cli.target.writer_for`
(the store, or the context actor holding it), and call the registered
operations of the service, so the command line prints what every port answers.
``merge``, ``pick`` and ``revert`` exit 1 when refused for a conflict (nothing
written), 0 otherwise; ``--json`` prints the reply.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from morphz.cli.console import EXIT_REFUSED, Env, emit, run_command
from morphz.cli.target import address_option, writer_for

STRATEGY = click.option(
    "--strategy",
    type=click.Choice(["fail", "ours", "theirs"]),
    default="fail",
    show_default=True,
    help="What to do with a conflict: refuse everything, keep ours, or take theirs.",
)
DRY_RUN = click.option(
    "--dry-run", is_flag=True, help="Decide everything and print it; write nothing."
)
RESOLVE = click.option(
    "--resolve",
    "resolve",
    multiple=True,
    metavar="FRAME=ours|theirs",
    help="Resolve one frame's conflict (repeatable); wins over --strategy.",
)


def _resolutions(items: tuple[str, ...]) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for item in items:
        frame, _, side = item.rpartition("=")
        if not frame or side not in ("ours", "theirs"):
            raise click.BadParameter(
                f"{item!r}: write FRAME=ours or FRAME=theirs", param_hint="--resolve"
            )
        out[frame] = side
    return out or None


def _frame_lines(d: Any) -> list[str]:
    lines = []
    for f in d["frames"]:
        extra = ""
        if f["status"] == "behind":
            extra = f" (ours {f['change']})"
        elif f.get("both") and f["status"] != "conflict":
            extra = " (both sides, merged)"
        lines.append(f"  {f['status']:<9} {f['id']}{extra}")
        for c in f.get("fields") or ():
            sides = f"base {c['base']} | ours {c['ours']} | theirs {c['theirs']}"
            lines.append(f"            {c['field']}: {sides}")
    return lines


def human_diff(d: Any) -> str:
    """A diff as ``morphz diff`` prints it."""
    base = d["base"]
    if base["via"] == "versions":
        head = f"{d['target']}: versions {d['ours_version']}..{d['theirs_version']}"
        return "\n".join([head, *(_frame_lines(d) or ["  no frame changed"])])
    lines = [
        f"{d['target']} (ours, v{d['ours_version']}) <- {d['source']} (theirs,"
        f" v{d['theirs_version']}); base: {base['via']} at version {base['version']}"
        f" of {d['target'] if base['held_by'] == 'target' else d['source']}"
    ]
    lines += _frame_lines(d) or ["  no frame differs"]
    if d["events"]:
        refs = " ".join(e["ref"] for e in d["events"][:20])
        more = f" (+{len(d['events']) - 20})" if len(d["events"]) > 20 else ""
        lines.append(f"observations new in {d['source']}: {refs}{more}")
    rel = d["relations"]
    for sign, key in (("+", "added"), ("-", "removed")):
        for s, label, o in rel[key]:
            lines.append(f"  {sign} {s} {label} {o}")
    return "\n".join(lines)


def human_merge(d: Any) -> str:
    """A merge's reply as ``morphz merge`` prints it."""
    status = d["status"]
    if status == "refused":
        if d.get("receipt"):
            errors = d["receipt"].get("errors") or []
            why = "; ".join(e.get("message", "") for e in errors) or "rejected"
            return f"refused: the engine rejected the merge ({why}); nothing written"
        lines = [f"refused: {len(d['unresolved'])} conflict(s), nothing written"]
        lines += [line for line in _frame_lines(d) if "conflict" in line or ": base " in line]
        lines.append("resolve with --strategy ours|theirs or --resolve FRAME=ours|theirs")
        return "\n".join(lines)
    if status == "nothing":
        return f"nothing to merge from {d['source']}"
    verb = "would apply" if status == "dry_run" else "applied"
    versions = d.get("versions") or []
    at = f" at version {versions[0]}" if len(versions) == 1 else ""
    if len(versions) > 1:
        at = f" at versions {versions[0]}..{versions[-1]}"
    lines = [f"{verb} {len(d['applied'])} frame(s) from {d['source']}{at}"]
    by_id = {f["id"]: f for f in d["frames"]}
    for fid in d["applied"]:
        f = by_id.get(fid, {"status": "?"})
        lines.append(f"  {f['status']:<9} {fid}")
    if d.get("copied"):
        lines.append(f"observations copied: {' '.join(d['copied'])}")
    return "\n".join(lines)


def _search(env: Env, source: str, query: str) -> list[str]:
    """The frame ids a search of *source* finds for *query* (at most 100): its index is
    caught up first when this process can open it for writing."""
    from protocol.errors import StoreLocked
    from service.store import Store

    store = Store(env.store)
    try:
        other = store.open(source, create=False)
        writable = True
    except StoreLocked:
        other, writable = store.open(source, readonly=True), False
    with other:
        if writable:
            other.searcher.catch_up()
        found = other.searcher.find(query, limit=100)
        return [h.id for h in found.hits if not h.id.startswith("@")]


def _finish(env: Env, reply: Any) -> None:
    emit(env, reply, human_merge)
    if reply["status"] == "refused":
        sys.exit(EXIT_REFUSED)


@click.command("fork")
@click.argument("new_context")
@click.option("--at-version", type=int, default=None, help="Fork as of this version.")
@click.pass_obj
@run_command
def fork_cmd(env: Env, new_context: str, at_version: int | None) -> None:
    """Fork this context into NEW_CONTEXT as of a version, for new tasks to start from.

    Atomic: a failed fork leaves no NEW_CONTEXT behind.
    """
    from service.store import Store

    doc = Store(env.store).fork(env.context, new_context, at_version=at_version)
    emit(env, doc, lambda d: f"{d['context']}: forked from {d['origin']} at version {d['version']}")


@click.command("diff")
@click.argument("source", required=False)
@click.option("--from", "since", default=None, help="Without SOURCE: from this version or tag.")
@click.option("--to", "until", default=None, help="Without SOURCE: to this version or tag.")
@click.pass_obj
@run_command
def diff_cmd(env: Env, source: str | None, since: str | None, until: str | None) -> None:
    """What merging SOURCE into this context would find: per frame added, changed, retired,
    conflict or behind since the merge base; new observations; relations. Without SOURCE,
    what changed in this context --from a version --to another (default now)."""
    if (source is None) == (since is None):
        raise click.UsageError("give SOURCE, or --from (and --to) without SOURCE")
    if source is None and since is not None:
        with env.read() as ctx:
            reply = ctx.changes(_version(since), None if until is None else _version(until))
    else:
        with env.read() as ctx:
            reply = ctx.diff(source)
    emit(env, reply, human_diff)


def _version(text: str) -> int | str:
    return int(text) if text.isdigit() else text


@click.command("merge")
@click.argument("source")
@DRY_RUN
@STRATEGY
@RESOLVE
@address_option
@click.pass_obj
@run_command
def merge_cmd(
    env: Env,
    source: str,
    dry_run: bool,
    strategy: str,
    resolve: tuple[str, ...],
    address: str | None,
) -> None:
    """Merge SOURCE (a fork of this context, or merged with it before) into this context,
    as one atomic write. Exit 1 when a conflict refuses it (nothing written)."""
    resolutions = _resolutions(resolve)
    with writer_for(env, address) as w:
        reply = w.port.merge(source, dry_run=dry_run, strategy=strategy, resolutions=resolutions)
    _finish(env, reply)


@click.command("pick")
@click.argument("source")
@click.option("--frames", "frames", multiple=True, help="A frame to pick (repeatable).")
@click.option("--from-version", type=int, default=None, help="First version of SOURCE to pick.")
@click.option("--to-version", type=int, default=None, help="Last version of SOURCE to pick.")
@click.option("--query", default=None, help="Pick the frames a search of SOURCE finds.")
@DRY_RUN
@STRATEGY
@RESOLVE
@address_option
@click.pass_obj
@run_command
def pick_cmd(
    env: Env,
    source: str,
    frames: tuple[str, ...],
    from_version: int | None,
    to_version: int | None,
    query: str | None,
    dry_run: bool,
    strategy: str,
    resolve: tuple[str, ...],
    address: str | None,
) -> None:
    """Apply only some of SOURCE's changes: --frames, a version range of SOURCE, or the
    frames a --query finds in SOURCE; the rules and exit codes of merge."""
    ids = list(frames)
    if query is not None:
        ids += _search(env, source, query)
        if not ids and from_version is None and to_version is None:
            doc = {"status": "nothing", "source": source, "query": query}
            emit(env, doc, lambda d: f"no frame of {source} matches {query!r}")
            return
    resolutions = _resolutions(resolve)
    with writer_for(env, address) as w:
        reply = w.port.pick(
            source,
            frames=ids or None,
            from_version=from_version,
            to_version=to_version,
            dry_run=dry_run,
            strategy=strategy,
            resolutions=resolutions,
        )
    _finish(env, reply)


@click.command("tag")
@click.argument("name", required=False)
@click.option(
    "--version", "version", type=int, default=None, help="Tag this version (default: now)."
)
@click.option("--delete", is_flag=True, help="Remove tag NAME.")
@address_option
@click.pass_obj
@run_command
def tag_cmd(
    env: Env, name: str | None, version: int | None, delete: bool, address: str | None
) -> None:
    """Name a version of this context NAME (a snapshot as-of reads and revert can name);
    without NAME, list the tags."""
    if name is None:
        with env.read() as ctx:
            held = ctx.tags()
        emit(
            env,
            {"tags": held},
            lambda d: "\n".join(f"{t.name}\tv{t.version}" for t in d["tags"]) or "no tags",
        )
        return
    with writer_for(env, address) as w:
        reply = w.port.untag(name) if delete else w.port.tag(name, version)
    verb = "removed tag" if delete else "tagged"
    emit(env, reply, lambda d: f"{verb} {d['name']} = version {d['version']}")


@click.command("revert")
@click.argument("from_version", type=int)
@click.argument("to_version", type=int)
@DRY_RUN
@STRATEGY
@RESOLVE
@address_option
@click.pass_obj
@run_command
def revert_cmd(
    env: Env,
    from_version: int,
    to_version: int,
    dry_run: bool,
    strategy: str,
    resolve: tuple[str, ...],
    address: str | None,
) -> None:
    """Undo what versions FROM_VERSION..TO_VERSION did, as new transactions (history is
    never rewritten). Exit 1 when a later change conflicts (nothing written)."""
    resolutions = _resolutions(resolve)
    with writer_for(env, address) as w:
        reply = w.port.revert(
            from_version, to_version, dry_run=dry_run, strategy=strategy, resolutions=resolutions
        )
    _finish(env, reply)


BRANCH_COMMANDS = (fork_cmd, diff_cmd, merge_cmd, pick_cmd, tag_cmd, revert_cmd)
"""The commands this module adds to ``morphz``."""
