"""Branch, merge, pick and revert between contexts that share a history (docs/branches.md).

The rules are :mod:`protocol.branches`; this module reads the three sides and
writes the result. The **merge base** of a target and a source comes from their
meta (:func:`lineage`): the last merge between them, else the fork point (a fork
records its origin and version, :mod:`service.fork`). Base frames are read from
the history of the side that holds the base (``frame_at``), base relations from
its log (:func:`service.asof.relations_at`).

A **merge** is one atomic write of the target: the source's new observations
are copied (same stable ids, new ``@eN`` numbers), then the operations of
:func:`protocol.branches.plan_ops` are decided by the engine as context
transactions of at most 1,024 operations each, one after another; if any is
rejected, or a conflict is left unresolved under ``fail``, nothing is written.
Each log record of a merge carries ``merge`` (source, its version, the base,
who); the target's meta records the merge (the next base), and the audit log
gets one entry. A dry run decides everything the same way and writes nothing.

How the source reaches the target: the service reads the source's store
directly, read-only, from the target's store directory (a fork lives beside its
origin, :meth:`service.store.Store.fork`). LMDB lets that read run beside the
source's writer, so a context actor serving the target merges a source that
another actor serves. A source elsewhere (another node's store) cannot be merged.

The read half (the three sides read into one :class:`~service.diffs.Diff`, and the
``diff`` and ``changes`` operations) is :mod:`service.diffs`; this module is the one
write path (:func:`apply_diff`) that merge, pick and revert share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field, Strict

from protocol.branches import (
    STRATEGIES,
    BranchReply,
    FrameDiff,
    Lineage,
    Plan,
    Resolution,
    Strategy,
    classify,
    plan_ops,
    relation_changes,
)
from protocol.engine import evaluate
from protocol.errors import OutOfRange, RequestError
from protocol.governance import audit_entry
from protocol.ids import event_ref
from protocol.receipts import Receipt
from protocol.replies import Reply
from protocol.state import RETIRED, Event, Frame, Meta
from protocol.view import Changeset, ReadView, WriteView
from service.asof import VersionRef, branches_of, now, relations_at, resolve
from service.diffs import (
    ContextName,
    Diff,
    Source,
    compute,
    lineage_of,
    opened,
    reply_of,
    store_dir,
)
from service.fork import fork_store
from service.registry import MAX_FRAME_ID, Caller, Count

if TYPE_CHECKING:
    from service.context import Context

T = TypeVar("T")

MAX_PICK = 10_000
"""Most frame ids one pick names."""
MAX_MERGES_KEPT = 256
"""Most sources whose last merge a context's meta remembers."""

StrategyArg = Literal["fail", "ours", "theirs"]
Resolutions = Annotated[
    dict[Annotated[str, Field(max_length=MAX_FRAME_ID)], Literal["ours", "theirs"]],
    Field(max_length=MAX_PICK),
]
"""Per-frame resolutions of conflicts: ``{frame id: "ours" | "theirs"}``."""
PickIds = Annotated[
    Sequence[Annotated[str, Strict(), Field(max_length=MAX_FRAME_ID)]], Field(max_length=MAX_PICK)
]


class ForkReply(Reply):
    """A new fork: its *context* name, its *origin*, the *version* and *tick* it starts
    at, and how many observations (*events*) and waiting inputs it took along."""

    context: str
    origin: str
    version: int
    tick: int
    events: int
    waiting: int


def branch(ctx: Context, new: ContextName, at_version: VersionRef | None = None) -> ForkReply:
    """Fork this context into the new context *new* of the same store, as of *at_version*
    (a version or a tag; default the current one): the fork to explore in, then diff
    and merge back. RequestError ``exists`` if *new* exists."""
    root = store_dir(ctx)
    at = None if at_version is None else ctx.backend.read(lambda v: resolve(v, at_version))
    return ForkReply.of(fork_store(root, ctx.name, new, at_version=at))


class _Abort(Exception):
    """Raised inside a write to discard it (a dry run, a refusal); carries the reply."""

    def __init__(self, reply: BranchReply) -> None:
        super().__init__("aborted")
        self.reply = reply


def _copy_events(
    w: WriteView, events: list[tuple[Event, str]], wanted: set[str] | None
) -> dict[str, str]:
    """Copy the source's *events* (those *wanted* by id, or all) into the target, each with
    its stable id and a new number; the target's reference of each copied id."""
    meta = w.meta()
    seq = meta.next_seq
    fresh: list[Event] = []
    contents: list[tuple[int, str]] = []
    refs: dict[str, str] = {}
    return_meta = meta.copy()
    for e, text in events:
        if wanted is not None and e.id not in wanted:
            continue
        c = e.copy()
        c.seq = seq
        c.claimed_tick = meta.tick
        fresh.append(c)
        contents.append((seq, text))
        refs[e.id] = event_ref(seq)
        seq += 1
    if fresh:
        return_meta.next_seq = seq
        w.apply(
            Changeset(
                meta=return_meta,
                events=fresh,
                contents=contents,
                outbox={"version": meta.version, "frames": [], "events": [e.seq for e in fresh]},
            )
        )
    return refs


def _with_contents(sv: ReadView, events: list[Event]) -> list[tuple[Event, str]]:
    return [(e, sv.event_content(e.seq) or "") for e in events]


def apply_diff(
    w: WriteView,
    d: Diff,
    *,
    target: str,
    source: str,
    strategy: Strategy,
    resolutions: dict[str, Resolution],
    dry_run: bool,
    record: dict[str, Any],
    caller: Caller,
    events: list[tuple[Event, str]],
    all_events: bool,
    remember: bool = True,
) -> BranchReply:
    """Write the merge of diff *d* into the target's write view *w* (module docstring);
    raises :class:`_Abort` with the reply when nothing may be written."""
    if strategy not in STRATEGIES:  # pragma: no cover - the argument model allows no other
        raise RequestError(f"unknown strategy {strategy!r}", code="bad_argument")
    unknown = sorted(set(resolutions) - {f.id for f in d.frames if f.status == "conflict"})
    if unknown:
        raise RequestError(
            f"resolutions name frames not in conflict: {', '.join(unknown)[:200]}",
            code="bad_resolution",
        )
    unresolved = [f.id for f in d.frames if f.status == "conflict" and f.id not in resolutions]
    if unresolved and strategy == "fail":
        raise _Abort(
            reply_of(target, source, d, status="refused", applied=[], unresolved=unresolved)
        )
    pairs: list[tuple[Frame | None, Frame]] = []
    creation: dict[str, int] = {}
    for f in d.frames:
        if f.status == "behind":
            continue
        res: Resolution = resolutions.get(f.id) or ("ours" if strategy == "ours" else "theirs")
        new = f.resolved(res)
        if new is not None:
            pairs.append((f.ours, new))
            creation[f.id] = f.theirs.created_version if f.theirs is not None else 0
    pairs.sort(key=lambda p: (creation[p[1].id], p[1].id))
    cited = {s for _, new in pairs for s in new.sources if s.startswith("ev:")}
    refs = _copy_events(w, events, None if all_events else cited)
    copied = sorted(refs.values(), key=lambda r: int(r[2:]))
    for eid in cited:
        if eid not in refs:
            seq = w.event_seq(eid)
            if seq is not None:
                refs[eid] = event_ref(seq)
    added, removed, _, _ = d.rel
    plan: Plan = plan_ops(
        pairs,
        exists=lambda fid: w.frame(fid) is not None,
        event_refs=refs,
        relations_added=added,
        relations_removed=removed,
    )
    versions: list[int] = []
    when = now()
    who = caller.holder or "embedded"
    meta = w.meta()
    txs = plan.transactions(meta.version, str(record.get("reason") or f"merge {source}"))
    for n, tx in enumerate(txs):
        outcome = evaluate(w, tx, now=when)
        if outcome.changes is None:
            receipt: Receipt = outcome.receipt
            raise _Abort(
                reply_of(
                    target,
                    source,
                    d,
                    status="refused",
                    applied=[],
                    unresolved=unresolved,
                    receipt=receipt.to_dict(),
                )
            )
        changes = outcome.changes
        if changes.txlog is not None:
            changes.txlog["merge"] = {**record, "by": who, "part": n + 1, "of": len(txs)}
        if n == len(txs) - 1 and remember and changes.meta is not None:
            changes.meta = _remember(
                changes.meta, source, d.theirs_version, meta.version + len(txs)
            )
        if n == len(txs) - 1:
            changes.audit.append(
                audit_entry(
                    str(record.get("method") or "merge"),
                    "commit",
                    holder=caller.holder,
                    allowed=True,
                    at=when,
                    why=f"{record.get('method') or 'merge'} of {source} into {target}:"
                    f" {len(plan.frames)} frames at versions"
                    f" {meta.version + 1}..{meta.version + n + 1}",
                    context=target,
                    source=source,
                )
            )
        w.apply(changes)
        versions.append(outcome.receipt.version)
    status = "merged" if versions or copied else "nothing"
    reply = reply_of(
        target,
        source,
        d,
        status="dry_run" if dry_run else status,
        applied=plan.frames,
        versions=versions,
        copied=copied,
        unresolved=unresolved,
        dropped_sources=[list(p) for p in plan.dropped_sources],
    )
    if dry_run:
        raise _Abort(reply)
    return reply


def _remember(meta: Meta, source: str, source_version: int, version: int) -> Meta:
    record = branches_of(meta)
    merged = dict(record.get("merged") or {})
    merged.pop(source, None)
    merged[source] = {"source_version": source_version, "version": version}
    while len(merged) > MAX_MERGES_KEPT:
        merged.pop(next(iter(merged)))
    record["merged"] = merged
    new = meta.copy()
    new.branches = record
    return new


def merge_contexts(
    target: Context,
    source: Context | Source,
    *,
    dry_run: bool = False,
    strategy: Strategy = "fail",
    resolutions: dict[str, Resolution] | None = None,
    ids: Sequence[str] | None = None,
    theirs_at: int | None = None,
    caller: Caller | None = None,
) -> BranchReply:
    """Merge *source* into *target* (or pick frames *ids* / the source as of *theirs_at*)
    in one atomic write of the target; see the module docstring and :class:`BranchReply`."""
    method = "merge" if ids is None and theirs_at is None else "pick"

    def run(w: WriteView) -> BranchReply:
        def inner(sv: ReadView) -> BranchReply:
            lin = lineage_of(w, sv, target.name, source.name)
            if theirs_at is not None and not lin.theirs_since <= theirs_at <= sv.meta().version:
                raise OutOfRange(
                    f"version {theirs_at} of {source.name} is not between the merge base"
                    f" ({lin.theirs_since}) and its current version ({sv.meta().version})"
                )
            d = compute(w, sv, lin, theirs_at=theirs_at, ids=None if ids is None else set(ids))
            record = {
                "method": method,
                "source": source.name,
                "source_version": d.theirs_version,
                "base": lin.as_dict(),
            }
            return apply_diff(
                w,
                d,
                target=target.name,
                source=source.name,
                strategy=strategy,
                resolutions=dict(resolutions or {}),
                dry_run=dry_run,
                record=record,
                caller=caller or Caller(),
                events=_with_contents(sv, d.events),
                all_events=ids is None,
                remember=method == "merge",
            )

        return source.backend.read(inner)

    try:
        reply: BranchReply = target.backend.transact(run)
    except _Abort as abort:
        return abort.reply
    return reply


def merge(
    ctx: Context,
    source: ContextName,
    dry_run: bool = False,
    strategy: StrategyArg = "fail",
    resolutions: Resolutions | None = None,
    *,
    caller: Caller,
) -> BranchReply:
    """Merge *source* into this context as one atomic write: each change only the source
    made is applied, observations and relations are united, conflicts are refused
    (``fail``), kept (``ours``) or taken (``theirs``), or resolved per frame.
    ``status``: ``merged``, ``nothing``, ``refused`` (nothing written) or ``dry_run``."""
    with opened(ctx, source) as other:
        return merge_contexts(
            ctx, other, dry_run=dry_run, strategy=strategy, resolutions=resolutions, caller=caller
        )


def pick(
    ctx: Context,
    source: ContextName,
    frames: PickIds | None = None,
    from_version: Count | None = None,
    to_version: Count | None = None,
    dry_run: bool = False,
    strategy: StrategyArg = "fail",
    resolutions: Resolutions | None = None,
    *,
    caller: Caller,
) -> BranchReply:
    """Apply only some of *source*'s changes: the frames *frames*, and/or those the source's
    versions *from_version*..*to_version* wrote (as they stood at *to_version*), with
    the observations they cite and their relations; the rules of ``merge``."""
    if frames is None and from_version is None and to_version is None:
        raise RequestError("pick needs frames, or a version range", code="bad_argument")
    with opened(ctx, source) as other:
        ids: set[str] | None = None if frames is None else set(frames)
        theirs_at = None
        if from_version is not None or to_version is not None:

            def written(sv: ReadView) -> tuple[set[str], int]:
                hi = sv.meta().version if to_version is None else resolve(sv, to_version)
                lo = 1 if from_version is None else from_version
                if lo > hi:
                    raise OutOfRange(f"from version {lo} is after to version {hi}")
                touched = {
                    f.id
                    for f in sv.iter_frames()
                    if any(lo <= n <= hi for n in sv.frame_history(f.id))
                }
                return touched, hi

            touched, theirs_at = other.backend.read(written)
            ids = touched if ids is None else ids | touched
        return merge_contexts(
            ctx,
            other,
            dry_run=dry_run,
            strategy=strategy,
            resolutions=resolutions,
            ids=sorted(ids or ()),
            theirs_at=theirs_at,
            caller=caller,
        )


def revert(
    ctx: Context,
    from_version: Count,
    to_version: Count,
    dry_run: bool = False,
    strategy: StrategyArg = "fail",
    resolutions: Resolutions | None = None,
    *,
    caller: Caller,
) -> BranchReply:
    """Undo what versions *from_version*..*to_version* did, as new transactions (history is
    never rewritten): a three-way merge whose base is the context at *to_version*,
    whose "theirs" is the context before *from_version*, and whose "ours" is now. A
    frame changed again after *to_version* is a conflict."""

    def run(w: WriteView) -> BranchReply:
        current = w.meta().version
        if not 1 <= from_version <= to_version <= current:
            raise OutOfRange(
                f"a revert needs 1 <= from ({from_version}) <= to ({to_version})"
                f" <= the current version ({current})"
            )
        touched = {
            f.id
            for f in w.iter_frames()
            if any(from_version <= n <= to_version for n in w.frame_history(f.id))
        }
        lin = Lineage("target", to_version, to_version, to_version, "revert")
        frames: list[FrameDiff] = []
        for fid in sorted(touched):
            base = w.frame_at(fid, to_version)
            past = w.frame_at(fid, from_version - 1)
            if past is None and base is not None:  # created in the range: undone by retiring
                past = base.copy()
                past.lifecycle = RETIRED
            found = classify(fid, base, w.frame(fid), past)
            if found is not None and found.status != "behind":
                frames.append(found)
        rel = relation_changes(
            relations_at(w, to_version), set(w.iter_relations()), relations_at(w, from_version - 1)
        )
        d = Diff(lin, current, from_version - 1, frames, [], rel)
        record = {
            "method": "revert",
            "source": ctx.name,
            "reverted": [from_version, to_version],
            "reason": f"revert versions {from_version}..{to_version}",
        }
        return apply_diff(
            w,
            d,
            target=ctx.name,
            source=ctx.name,
            strategy=strategy,
            resolutions=dict(resolutions or {}),
            dry_run=dry_run,
            record=record,
            caller=caller,
            events=[],
            all_events=False,
            remember=False,
        )

    try:
        reply: BranchReply = ctx.backend.transact(run)
    except _Abort as abort:
        return abort.reply
    return reply
