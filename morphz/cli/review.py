"""``morphz review`` and ``morphz audit``: memory governance from the command line (R42, R43).

``review`` lists what awaits a human (candidates the admission policy would
hold, with its reasons; quarantined frames with their findings) and records
human decisions (``accept`` / ``reject FRAME --reviewer NAME``), runs admission
(``admit``) or the quarantine scan (``scan``), each through the service's
:class:`~service.Context` methods (``pending``, ``review``, ``admit``,
``quarantine_scan``, ``audit``; audited as holder ``cli:<login>``): listing
opens the context read-only (so it works beside a running context actor);
deciding opens it for writing. When a context actor holds the store
(:class:`~protocol.errors.StoreLocked`), ``--address`` (a Ray address, e.g.
``auto``) sends the decision through the actor's methods instead; Ray is
imported only then. ``audit`` reads the context's durable audit log read-only.

Register with ``cli.add_command(review_cmd)`` and ``cli.add_command(audit_cmd)``.
Exit codes: 0 done; 1 not found, refused (not reviewable, store held by an
actor and no ``--address``) or unreachable; 2 bad input (bad context name,
reviewer, frame id or option values), nothing changed.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from actors.client.names import DEFAULT_NAMESPACE
from morphz.cli.console import Env, emit, failing_as_usage
from protocol.errors import StoreError, StoreLocked
from protocol.replies import plain

if TYPE_CHECKING:
    from service.context import Context

BAD_INPUT = frozenset(
    {"bad_context_name", "bad_reviewer", "bad_decision", "bad_argument", "out_of_range"}
)
"""Error codes that mean the command line itself was wrong (exit 2)."""
MAX_CAPABILITY_BYTES = 16 << 10


_run = failing_as_usage(lambda err: err.code in BAD_INPUT)
"""Typed errors become a clear message and an exit code: 2 bad input, 1 the rest."""


def _holder() -> str:
    """Who the CLI audits as: ``cli:<login name>``."""
    try:
        return "cli:" + getpass.getuser()
    except (OSError, KeyError):
        return "cli"


def _check_name(env: Env) -> None:
    from storage import check_context_name

    check_context_name(env.context)


def _open_for_reading(env: Env) -> Any:
    from service.store import Store

    _check_name(env)
    return Store(env.store).open(env.context, readonly=True)


def _open_for_writing(env: Env) -> Any:
    """The context for writing, or StoreLocked (a context actor holds it); never created here."""
    from service.store import Store

    _check_name(env)
    return Store(env.store).open(env.context, create=False)


class ActorOptions:
    """``--address``, ``--namespace`` and ``--capability`` of the actor path."""

    def __init__(self, address: str | None, namespace: str, capability: Path | None) -> None:
        self.address = address
        self.namespace = namespace
        self.capability = capability

    def token(self) -> bytes | None:
        if self.capability is None:
            return None
        try:
            data = self.capability.read_bytes()
        except OSError as e:
            raise StoreError(f"cannot read the capability file: {e}", code="bad_argument") from e
        if not 0 < len(data) <= MAX_CAPABILITY_BYTES:
            raise StoreError("the capability file is empty or too large", code="bad_argument")
        return data


def actor_options(fn: Callable[..., None]) -> Callable[..., None]:
    """Add the options that send a command through a running context actor."""
    fn = click.option(
        "--capability",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="File holding a capability token (for a context served with enforcement).",
    )(fn)
    fn = click.option(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        show_default=True,
        help="Ray namespace of the context actor.",
    )(fn)
    fn = click.option(
        "--address",
        default=None,
        help="Ray address (e.g. 'auto'): if a context actor holds the store, go through it.",
    )(fn)
    return fn


def _through_actor(env: Env, opts: ActorOptions, call: Callable[[Any], Any]) -> Any:
    """Run *call(handle)* against the context actor of *env*; Ray is imported only here."""
    import ray

    from actors.client.joining import init_ray
    from actors.client.lookup import lookup

    token = opts.token()
    started = init_ray(opts.address, namespace=opts.namespace)
    try:
        handle = lookup(env.context, opts.namespace, capability=token)
        return call(handle)
    finally:
        if started:
            ray.shutdown()


def _decide(
    env: Env,
    opts: ActorOptions,
    direct: Callable[[Context], dict[str, Any]],
    remote: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """*direct(context)* on the store; if an actor holds it and --address is given, *remote*."""
    try:
        ctx = _open_for_writing(env)
    except StoreLocked as e:
        if opts.address is None:
            raise StoreLocked(
                f"{e.message}. A context actor serves it: pass --address (e.g. --address auto)"
                " to decide through the actor"
            ) from e
        doc = plain(_through_actor(env, opts, remote))
        return {"context": env.context, **doc, "via": "actor"}
    with ctx:
        doc = direct(ctx)
    return {"context": env.context, **doc, "via": "store"}


# -- rendering ------------------------------------------------------------------------


def _human_pending(d: dict[str, Any]) -> str:
    items = d["items"]
    human = [i for i in items if i["awaits"] == "human"]
    lines = [
        f"context {d['context']}, version {d['version']}: {len(human)} await a human,"
        f" {len(items) - len(human)} await admission"
    ]
    for i in items:
        if i["trust"] == "quarantined":
            head = f"  {i['frame']}  quarantined"
        else:
            head = f"  {i['frame']}  candidate  {i['verdict']}"
            if i["awaits"] == "admission":
                head += "  (run `morphz review admit`)"
        lines.append(head)
        lines.extend(f"      - {r}" for r in i["reasons"])
        lines.append(f"      {i['body']}")
    return "\n".join(lines)


def _human_decisions(d: dict[str, Any]) -> str:
    lines = [f"{x['verdict']}  {x['frame']}: {'; '.join(x['reasons'])}" for x in d["decisions"]]
    if not lines:
        lines.append("no candidates")
    at = f"committed at version {d['version']}" if d["version"] is not None else "nothing changed"
    return "\n".join([*lines, at])


def _human_review(d: dict[str, Any]) -> str:
    x = d["decision"]
    word = "accepted" if x["verdict"] == "accept" else "rejected"
    return f"{word} {x['frame']} at version {d['version']} (reviewed by {x['reviewer']})"


def _human_scan(d: dict[str, Any]) -> str:
    lines = [f"{f['rule']}  {f['frame']}: {f['detail']}" for f in d["findings"]]
    for s in d.get("sensitive") or ():  # located and masked: never the secret itself
        lines.append(
            f"sensitive  {s['ref']} {s['field']}[{s['start']}:{s['end']}] {s['name']}:"
            f" {s['excerpt']}  ({s['remedy']})"
        )
    if d["spared"]:
        lines.append(f"spared (a human accepted them): {' '.join(d['spared'])}")
    if d["quarantined"]:
        lines.append(f"quarantined {' '.join(d['quarantined'])} at version {d['version']}")
    else:
        lines.append("nothing quarantined")
    return "\n".join(lines)


def _when(t: Any) -> str:
    try:
        return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _human_audit(d: dict[str, Any]) -> str:
    from protocol.governance import printable

    lines = []
    for e in d["entries"]:
        times = f" x{e['count']} until {_when(e.get('last_time'))}" if e.get("count", 1) > 1 else ""
        more = f" (more of #{e['coalesces']})" if e.get("coalesces") else ""
        who = e.get("holder") or (f"claimed:{e['claimed']}" if e.get("claimed") else "-")
        lines.append(
            printable(
                f"#{e['seq']} {_when(e.get('time'))} {who} {e.get('method')}"
                f" ({e.get('op')}) {e.get('outcome')}{times}{more}: {e.get('why', '')}"
            )
        )
    return "\n".join(lines) or "no audit entries"


# -- the commands -----------------------------------------------------------------------


@click.group("review", invoke_without_command=True)
@click.pass_context
def review_cmd(click_ctx: click.Context) -> None:
    """Human review of memory: list what awaits a decision, accept, reject, admit, scan.

    Without a subcommand: the same as `morphz review list`.
    """
    if click_ctx.invoked_subcommand is None:
        click_ctx.invoke(list_cmd)


@review_cmd.command("list")
@actor_options
@click.pass_obj
@_run
def list_cmd(
    env: Env,
    address: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    capability: Path | None = None,
) -> None:
    """Held candidates with the policy's reasons, and quarantined frames with their findings.

    Reads the store read-only with the default policy; with --address, asks the
    context actor (its configured policy).
    """
    if address is not None:
        _check_name(env)
        opts = ActorOptions(address, namespace, capability)
        doc = {"context": env.context, **plain(_through_actor(env, opts, lambda h: h.pending()))}
        doc["via"] = "actor"
    else:
        with _open_for_reading(env) as ctx:
            doc = {"context": env.context, **plain(ctx.pending())}
        doc["via"] = "store"
    emit(env, doc, _human_pending)


def _reviewer_option(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--reason", default=None, help="Why (kept in the frame's review reasons).")(
        fn
    )
    return click.option("--reviewer", required=True, help="Who decides (1-128 characters).")(fn)


def _review(
    env: Env,
    frame_id: str,
    decision: str,
    reviewer: str,
    reason: str | None,
    opts: ActorOptions,
) -> None:
    from protocol.governance import check_review

    check_review(decision, reviewer, reason)  # bad input exits 2 before the store is opened

    def direct(ctx: Context) -> dict[str, Any]:
        # One write: the version after it is the one it committed at (this process
        # holds the writer lock).
        return dict(
            plain(ctx.acting(holder=_holder()).review(frame_id, decision, reviewer, reason))
        )

    doc = _decide(
        env,
        opts,
        direct,
        lambda h: h.review(frame_id, decision, reviewer, reason=reason),
    )
    emit(env, doc, _human_review)


@review_cmd.command("accept")
@click.argument("frame_id")
@_reviewer_option
@actor_options
@click.pass_obj
@_run
def accept_cmd(
    env: Env,
    frame_id: str,
    reviewer: str,
    reason: str | None,
    address: str | None,
    namespace: str,
    capability: Path | None,
) -> None:
    """Accept FRAME_ID (a candidate or a quarantined frame) into long-term memory."""
    _review(env, frame_id, "accept", reviewer, reason, ActorOptions(address, namespace, capability))


@review_cmd.command("reject")
@click.argument("frame_id")
@_reviewer_option
@actor_options
@click.pass_obj
@_run
def reject_cmd(
    env: Env,
    frame_id: str,
    reviewer: str,
    reason: str | None,
    address: str | None,
    namespace: str,
    capability: Path | None,
) -> None:
    """Reject FRAME_ID: its trust becomes rejected and it is retired (kept in history)."""
    _review(env, frame_id, "reject", reviewer, reason, ActorOptions(address, namespace, capability))


@review_cmd.command("admit")
@click.argument("frame_id", required=False)
@actor_options
@click.pass_obj
@_run
def admit_cmd(
    env: Env,
    frame_id: str | None,
    address: str | None,
    namespace: str,
    capability: Path | None,
) -> None:
    """Run the admission policy over the candidates (or FRAME_ID alone); holds change nothing."""

    def direct(ctx: Context) -> dict[str, Any]:
        return dict(plain(ctx.acting(holder=_holder()).admit(frame_id)))

    opts = ActorOptions(address, namespace, capability)
    doc = _decide(env, opts, direct, lambda h: h.admit(frame_id))
    emit(env, doc, _human_decisions)


@review_cmd.command("scan")
@click.option("--unused-ticks", type=int, default=None, help="Also flag frames unused this long.")
@click.option("--failed-uses", type=int, default=3, show_default=True)
@actor_options
@click.pass_obj
@_run
def scan_cmd(
    env: Env,
    unused_ticks: int | None,
    failed_uses: int,
    address: str | None,
    namespace: str,
    capability: Path | None,
) -> None:
    """Find low-quality frames (contradicted, failing, unused) and quarantine them (R43).

    Frames a human accepted are reported but spared.
    """
    from protocol.governance import check_scan

    check_scan(unused_ticks, failed_uses)

    def direct(ctx: Context) -> dict[str, Any]:
        scan = ctx.acting(holder=_holder()).quarantine_scan(unused_ticks, failed_uses)
        return dict(plain(scan))

    opts = ActorOptions(address, namespace, capability)
    doc = _decide(
        env,
        opts,
        direct,
        lambda h: h.quarantine_scan(unused_ticks=unused_ticks, failed_uses=failed_uses),
    )
    emit(env, doc, _human_scan)


def _human_chain(d: dict[str, Any]) -> str:
    head = f"head #{d['head_seq']} {d['head'] or '-'}"
    counts = f"{d['checked']} chained, {d['legacy']} before the chain, {d['pruned']} pruned"
    if d["ok"]:
        return f"audit chain intact: {counts}; {head}"
    return f"audit chain BROKEN at entry #{d['bad']}: {d['why']} ({counts})"


def _anchor(text: str | None) -> tuple[int, str] | None:
    if text is None:
        return None
    seq, _, mac = text.partition(":")
    if not seq.isdigit() or len(mac) != 64:
        raise click.BadParameter("an anchor is SEQ:MAC, as --verify prints the head")
    return int(seq), mac.lower()


def _verify_audit(env: Env, anchor: str | None, key_files: tuple[Path, ...]) -> None:
    from service.governance import verify_audit
    from storage.keys import audit_key_path, read_key_file

    head = _anchor(anchor)
    paths = list(key_files) or [audit_key_path()]
    keys = [read_key_file(p) for p in paths if key_files or p.exists()]
    with _open_for_reading(env) as ctx:
        report = verify_audit(ctx.backend, keys, head)
    emit(env, {"context": env.context, **report.to_dict()}, _human_chain)
    if not report.ok:
        raise click.exceptions.Exit(1)


@click.command("audit")
@click.argument("context_name", required=False)
@click.option("--after", type=int, default=0, show_default=True, help="Entries numbered above.")
@click.option("--limit", type=int, default=100, show_default=True, help="At most (1-1000).")
@click.option(
    "--verify", is_flag=True, help="Check the chain: exit 0 intact, 1 naming the first bad entry."
)
@click.option("--anchor", help="With --verify: a head SEQ:MAC exported earlier, kept elsewhere.")
@click.option(
    "--key-file",
    "key_files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --verify: an audit key file (repeatable; default: this machine's audit key).",
)
@click.pass_obj
@_run
def audit_cmd(
    env: Env,
    context_name: str | None,
    after: int,
    limit: int,
    verify: bool = False,
    anchor: str | None = None,
    key_files: tuple[Path, ...] = (),
) -> None:
    """The durable audit log of CONTEXT_NAME (default: --context), read-only.

    Denials, exports, imports and governance decisions, oldest first; works
    beside a running context actor. Page on with --after <last seq>. With
    --verify, checks that every entry is chained to the one before under the
    audit key (docs/security.md) and prints the head to anchor elsewhere.
    """
    from protocol.governance import check_page

    check_page(after, limit)  # bad input exits 2 before the store is opened
    target = env if context_name is None else Env(env.store, context_name, env.as_json)
    if verify:
        _verify_audit(target, anchor, key_files)
        return
    with _open_for_reading(target) as ctx:
        entries = ctx.audit(after, limit)
    doc = {
        "context": target.context,
        "entries": entries,
        "next_after": entries[-1]["seq"] if entries else after,
    }
    emit(env, doc, _human_audit)
