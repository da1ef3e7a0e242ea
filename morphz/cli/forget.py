"""``morphz forget`` and ``morphz compact``: erase content, then erase the pages that held it.

``forget TARGET --reason TEXT`` erases an observation's text (``@eN``) or every
body of a frame (its id) through :meth:`service.context.Context.forget`,
audited as holder ``cli:<login>``; a tombstone (digest, who, when, why) stays.
When a context actor holds the store, ``--address`` (e.g. ``auto``) sends it
through the actor (which needs an ``admin`` capability, ``--capability FILE``,
when it enforces them). ``compact`` copies the context's LMDB environment
without its free pages and swaps it in, so that what was forgotten is gone
from ``data.mdb`` too (the search index is dropped and rebuilt by the next
search); it refuses while the store is in use. See ``docs/forget.md``.

Register with ``cli.add_command(forget_cmd)`` and ``cli.add_command(compact_cmd)``.
Exit codes: 0 done (forgetting a forgotten record too: nothing is written);
1 not found, store in use, refused (no admin capability) or unreachable;
2 bad input (no reason, bad context name), nothing changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from morphz.cli.console import Env, emit, failing_as_usage
from morphz.cli.review import ActorOptions, _decide, _holder, actor_options
from protocol.errors import NotFound, OutOfRange

USAGE_CODES = frozenset({"missing_reason", "bad_argument", "bad_context_name", "out_of_range"})
"""Error codes that mean the command line itself was wrong (exit 2)."""

_run = failing_as_usage(lambda err: isinstance(err, OutOfRange) or err.code in USAGE_CODES)


def _human_forget(d: dict[str, Any]) -> str:
    head = "already forgotten" if d.get("duplicate") else "forgot"
    lines = [f"{head} {d['target']} ({d['kind']}): {d['digest']}"]
    lines.append(f"  by {d['by']}, reason: {d['reason']}")
    if d.get("cascade"):
        lines.append(f"  also forgot the recall results that carried it: {' '.join(d['cascade'])}")
    if d.get("log_versions"):
        lines.append(f"  log records rewritten: {' '.join(str(v) for v in d['log_versions'])}")
    if d.get("scrubbed"):
        lines.append(f"  reasons scrubbed at versions: {' '.join(str(v) for v in d['scrubbed'])}")
    if d.get("still_in"):
        lines.append(f"  still held by other frames (forget them too?): {' '.join(d['still_in'])}")
    if not d.get("duplicate"):
        lines.append("  run `morphz compact` to erase the freed pages from the data file")
    return "\n".join(lines)


@click.command("forget")
@click.argument("target")
@click.option("--reason", default=None, help="Why this content must go (required; audited).")
@click.option(
    "--by",
    "by",
    default=None,
    help="Who forgets it (default: cli:<login>; through an actor, the capability's holder).",
)
@actor_options
@click.pass_obj
@_run
def forget_cmd(
    env: Env,
    target: str,
    reason: str | None,
    by: str | None,
    address: str | None,
    namespace: str,
    capability: Path | None,
) -> None:
    """Erase the text of observation TARGET (@eN) or every body of frame TARGET.

    The record keeps its id and a tombstone: the sha256 digest of what was
    erased, who, when and why (also in the audit log). Frames that cite it keep
    the reference. Run `morphz compact` afterwards to erase the data file's
    freed pages.
    """
    from protocol.forget import check_reason

    why = check_reason(reason)  # before the store is touched
    holder = _holder()
    opts = ActorOptions(address, namespace, capability)

    def direct(ctx: Any) -> dict[str, Any]:
        return dict(ctx.acting(holder=holder).forget(target, reason=why, by=by))

    def remote(handle: Any) -> dict[str, Any]:
        return dict(handle.forget(target, reason=why))

    emit(env, _decide(env, opts, direct, remote), _human_forget)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


@click.command("compact")
@click.pass_obj
@_run
def compact_cmd(env: Env) -> None:
    """Copy the context's store without free pages and swap it in (after a forget).

    Refused while a writer (an agent, a context actor) or another reader holds
    the context. The search index is dropped; the next search rebuilds it.
    """
    from service.store import Store
    from storage import check_context_name
    from storage.compact import compact_context

    check_context_name(env.context)
    store = Store(env.store)
    if not store.exists(env.context):
        raise NotFound(f"no context {env.context!r} in the store {env.store}")
    report = compact_context(store.context_path(env.context))
    doc = {"context": env.context, **report}

    def human(d: dict[str, Any]) -> str:
        index = "; search index dropped (the next search rebuilds it)" if d["index_dropped"] else ""
        return (
            f"compacted context {d['context']}: data.mdb {_size(d['before'])}"
            f" -> {_size(d['after'])}{index}"
        )

    emit(env, doc, human)
