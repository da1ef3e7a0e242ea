"""What a decision produces: the receipt, the changeset, the log record and the outbox.

:func:`commit` turns a decided transaction into its :class:`Outcome`: the
committed receipt (lifecycle effects and capacity relief, R9) and the
:class:`~protocol.view.Changeset` a store applies — changed frames, events
and edges, the ``lastmod`` of every changed footprint key (R22), the pending
retirements, the exactly-once entry (R25), the ``model`` log record and the
outbox entry. :func:`reject` is the outcome of a refused transaction (nothing
to write). :func:`runtime_records` is the log record and outbox entry of a
runtime transaction (a consolidation window ending, R12).

The log records' keys and their order are part of the stored format: a replay
compares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.engine.overlay import Decision
from protocol.fields import field_key, lifecycle_key, shape_key
from protocol.ids import event_ref
from protocol.receipts import (
    MAX_CHANGES_LISTED,
    Conflict,
    Current,
    OpError,
    Receipt,
    Relief,
    committed_receipt,
)
from protocol.state import RETIRED, RETIRING, Event, Frame, Meta
from protocol.tx import ContextTx, Retire, edge_key, key_display
from protocol.txwire import tx_to_dict
from protocol.view import Changeset, ReadView


@dataclass(slots=True)
class Outcome:
    """A receipt and, when the transaction commits, the changeset to write."""

    receipt: Receipt
    changes: Changeset | None


def reject(
    meta: Meta,
    tx: ContextTx,
    *,
    errors: tuple[OpError, ...] = (),
    conflicts: tuple[Conflict, ...] = (),
    current: tuple[Current, ...] = (),
    changed_since_base: tuple[Conflict, ...] = (),
) -> Outcome:
    """The outcome of refusing *tx* against a context at *meta*: a rejected receipt, no changes.

    A ``conflict`` rejection carries *current* (the conflicting frames as they stand
    now) and *changed_since_base* (every frame written after the base).
    """
    return Outcome(
        Receipt(
            status="rejected",
            version=meta.version,
            base_version=tx.base_version,
            rebased=False,  # only a commit is rebased; a refusal applied nothing
            client_id=tx.client_id,
            tick=meta.tick,
            errors=errors,
            conflicts=conflicts,
            current=current,
            changed_since_base=changed_since_base,
        ),
        None,
    )


def changed_since(view: ReadView, base: int, upto: int) -> list[tuple[str, int]]:
    """``(frame id, last version that wrote it)`` for the frames written by the committed
    transactions after *base* up to *upto*, sorted by id (from the log's write lists).

    Empty when more than :data:`~protocol.receipts.MAX_CHANGES_LISTED` versions lie
    between: reading that many log records costs more than the read it would save.
    """
    if upto - base > MAX_CHANGES_LISTED:
        return []
    last: dict[str, int] = {}
    for version in range(base + 1, upto + 1):
        rec = view.txlog(version)
        if rec is None:
            continue
        for w in rec.get("writes") or ():
            last[w["frame"]] = version
    return sorted(last.items())


def commit(d: Decision, rebased: bool, digest: bytes, now: float, text: str | None) -> Outcome:
    """The committed outcome of the decision *d*: its receipt and everything to write.

    *digest* is the transaction's :func:`~protocol.engine.conflicts.tx_digest`
    (empty without a client id); *text* is logged as submitted, else the
    transaction's dict form is.
    """
    ov, tx, meta, version = d.ov, d.tx, d.meta, d.version
    frames_out: list[Frame] = []
    history: list[tuple[str, int]] = []
    due_add: list[tuple[int, str, int, int]] = []
    due_del: list[tuple[int, str]] = []
    changed: list[str] = []  # footprint keys of what changed (lastmod) ...
    shown: list[str] = []  # ... and the same as the log shows them (key_display)
    frame_ids: list[str] = []
    retired_now: list[str] = []
    retiring: list[tuple[str, int]] = []
    cancelled: list[str] = []
    restored: list[str] = []
    now_events: list[str] = []
    now_frames: list[str] = []
    pending_frames: list[str] = []
    now_tokens = 0
    pending_tokens = 0
    targets: set[str] | None = None
    moved: list[str] = []  # footprint keys of changed fields and lifecycles (lastmod only)
    fields_changed = d.fields_changed

    frames = ov.frames
    initials = ov.initial_frames
    for fid in sorted(frames) if len(frames) > 1 else frames:
        f = frames[fid]
        initial = initials.get(fid)
        if f is None or f is initial:
            if f is not None and f.lifecycle == RETIRING:
                if targets is None:
                    targets = _retire_targets(tx)
                if fid in targets:
                    retiring.append((fid, f.due_tick or 0))
            continue
        f.updated_version = version
        frames_out.append(f)
        frame_ids.append(f.id)
        history.append((fid, version))
        changed.append("f:" + fid)
        shown.append(fid)
        if fid in fields_changed:
            names = fields_changed[fid]
            if names is None:
                moved.append(shape_key(fid))
            elif names:
                prefix = field_key(fid, "")  # field_key(fid, n) is prefix + n
                moved.extend([prefix + n for n in names])
        was = initial.lifecycle if initial is not None else None
        life = f.lifecycle
        if initial is not None and (was != life or initial.protected != f.protected):
            moved.append(lifecycle_key(fid))
        if life == RETIRED:
            if was != RETIRED:
                retired_now.append(fid)
                now_frames.append(fid)
                now_tokens += f.tokens
        elif life == RETIRING:
            assert f.due_tick is not None
            retiring.append((fid, f.due_tick))
            if was != RETIRING or (initial is not None and initial.retire_gen != f.retire_gen):
                pending_frames.append(fid)
                pending_tokens += f.tokens
                due_add.append((f.due_tick, fid, f.retire_gen, f.revision))
        elif was == RETIRING:
            cancelled.append(fid)
        elif was == RETIRED:
            restored.append(fid)
        if (
            initial is not None
            and initial.lifecycle == RETIRING
            and (life != RETIRING or f.retire_gen != initial.retire_gen)
        ):
            assert initial.due_tick is not None
            due_del.append((initial.due_tick, fid))

    events_out: list[Event] = []
    event_seqs: list[int] = []
    events = ov.events
    initial_events = ov.initial_events
    for seq in sorted(events) if len(events) > 1 else events:
        e = events[seq]
        if e is initial_events[seq]:
            continue
        events_out.append(e)
        event_seqs.append(e.seq)
        ref = event_ref(e.seq)
        changed.append("e:" + ref)
        shown.append(ref)
        if e.lifecycle == RETIRED:
            retired_now.append(ref)
            now_events.append(ref)
            now_tokens += e.tokens
        else:
            restored.append(ref)

    edges = d.edges_changed
    for s, label, o in sorted(edges) if len(edges) > 1 else edges:
        key = edge_key(s, label, o)
        changed.append(key)
        shown.append(key_display(key))
    cites_add: list[tuple[str, str]] = []
    for f in frames_out:
        initial = initials.get(f.id)
        if initial is None:
            for src in f.sources:
                cites_add.append((src, f.id))
        elif f.sources is not initial.sources:
            cites_add.extend((src, f.id) for src in f.sources if src not in initial.sources)

    new_meta = meta.copy()
    new_meta.version = version

    receipt, receipt_doc = committed_receipt(
        version=version,
        base_version=tx.base_version,
        rebased=rebased,
        client_id=tx.client_id,
        tick=meta.tick,
        retired_now=retired_now,
        retiring=retiring,
        cancelled=cancelled,
        restored=restored,
        now_events=now_events,
        now_frames=now_frames,
        now_tokens=now_tokens,
        pending_frames=pending_frames,
        pending_tokens=pending_tokens,
        edits=tuple(d.edits),
    )
    lastmod = dict.fromkeys(changed, version)
    if moved:
        lastmod.update(dict.fromkeys(moved, version))
    cs = Changeset(
        meta=new_meta,
        frames=frames_out,
        events=events_out,
        rel_add=sorted(ov.rel_add) if len(ov.rel_add) > 1 else list(ov.rel_add),
        rel_del=sorted(ov.rel_del) if len(ov.rel_del) > 1 else list(ov.rel_del),
        cites_add=cites_add,
        lastmod=lastmod,
        due_add=due_add,
        due_del=due_del,
        client=None if tx.client_id is None else (tx.client_id, version, digest),
        txlog={
            "version": version,
            "kind": "model",
            "base_version": tx.base_version,
            "client_id": tx.client_id,
            "reason": tx.reason,
            # The text as submitted, whichever port carried it (a wire payload carries
            # it beside the parsed form), or, for a transaction submitted as a model,
            # its dict form (printing it is left to whoever reads the log).
            "text": text,
            "tx": None if text is not None else tx_to_dict(tx),
            "time": now,
            "tick": meta.tick,
            "changes": shown,
            "writes": d.writes,
            "receipt": receipt_doc,
            **_net_relations(ov.rel_add, ov.rel_del, touched=bool(edges)),
        },
        history=history,
        outbox={"version": version, "frames": frame_ids, "events": event_seqs},
    )
    return Outcome(receipt, cs)


def _net_relations(
    added: set[tuple[str, str, str]], removed: set[tuple[str, str, str]], *, touched: bool
) -> dict[str, Any]:
    """The log's ``relations`` field: the edges the transaction added (``+``) and removed
    (``-``), net of each other, as ``[subject, label, object, sign]``; present (possibly
    empty) whenever an operation *touched* an edge, absent otherwise.

    ``changes`` names every edge an operation touched (the conflict rules need that);
    this is what the relations became, so the graph as of an old version can be
    rebuilt from the log even for a transaction that related and unrelated one edge.
    """
    if not touched:
        return {}
    rows = [[*t, "+"] for t in sorted(added)] + [[*t, "-"] for t in sorted(removed)]
    return {"relations": rows}


def _retire_targets(tx: ContextTx) -> set[str]:
    out: set[str] = set()
    for op in tx.ops:
        if isinstance(op, Retire):
            out.update(op.refs)
    return out


def runtime_records(
    *, base: int, version: int, tick: int, finalized: list[str], tokens: int, now: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The log record and outbox entry of the runtime transaction finalizing *finalized*.

    *base* is the version before it, *version* the one it commits at, *tokens*
    what the finalized frames held.
    """
    receipt = Receipt(
        status="committed",
        version=version,
        base_version=base,
        tick=tick,
        retired_now=tuple(finalized),
        relief_now=Relief(frames=tuple(finalized), tokens=tokens),
    )
    reason = f"consolidation window ended at tick {tick}"
    txlog = {
        "version": version,
        "kind": "runtime",
        "base_version": base,
        "client_id": None,
        "reason": reason,
        "text": runtime_text(base, reason, finalized),
        "tx": None,
        "time": now,
        "tick": tick,
        "changes": list(finalized),
        "writes": [{"frame": fid, "op": "finalize"} for fid in finalized],
        "finalize": list(finalized),
        "receipt": receipt.to_dict(),
    }
    outbox = {"version": version, "frames": list(finalized), "events": []}
    return txlog, outbox


def runtime_text(base: int, reason: str, finalized: list[str]) -> str:
    """The text a runtime transaction is logged with: ``(runtime-tx … (finalize ID…))``."""
    ids = " ".join(finalized)
    return f'(runtime-tx\n  (base-version {base})\n  (reason "{reason}")\n  (finalize {ids}))'
