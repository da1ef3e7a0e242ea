"""Property (a) of the history checker: replaying the log on a fresh in-memory store.

How it works is told in :mod:`harness.checker`'s docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from harness.checker.log import int_or_none
from harness.checker.verdicts import REPLAY_DIVERGED, REPLAY_MISMATCH, Violation
from protocol.engine import evaluate, finalize_due
from protocol.errors import MorphzError
from protocol.fields import changed_fields, field_key, lifecycle_key, shape_key
from protocol.state import ACTIVE, Event, Frame, Meta
from protocol.tx import ContextTx
from protocol.view import Changeset, ReadView, WriteView
from storage.memory import MemoryBackend

REPLAYED_FIELDS = (
    "kind",
    "base_version",
    "client_id",
    "reason",
    "tick",
    "changes",
    "writes",
    "finalize",
    "receipt",
)
"""The log-record fields a replay must reproduce; text, tx and time are its inputs."""


def plain(value: Any) -> Any:
    """*value* with tuples as lists, as a record reads back from the store."""
    if isinstance(value, (list, tuple)):
        return [plain(x) for x in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def replay(
    records: Mapping[int, Mapping[str, Any]],
    txs: Mapping[int, ContextTx],
    events: list[Event],
    final_frames: list[Frame],
    final_relations: list[tuple[str, ...]],
    window: int,
    history_keep: int,
    out: list[Violation],
    *,
    tenant: str | None = None,
    project: str | None = None,
    moved: dict[str, list[int]] | None = None,
) -> int:
    """Replay the log on a fresh store; return the number of records replayed.

    *moved*, when given, is filled with the versions that changed each frame's fields
    and lifecycle (:func:`field_moves`), keyed like the footprint (``b:``, ``l:``).
    """
    store = MemoryBackend()
    fresh = []
    for e in events:
        w = e.copy()
        w.lifecycle = ACTIVE
        w.retired_version = None
        if w.kind == "user_message":
            w.delivered = True  # delivery is not logged; see the module docstring
        fresh.append(w)
    meta = Meta(
        window=window,
        history_keep=history_keep,
        next_seq=max((e.seq for e in events), default=0) + 1,
        created=1.0,
        tenant=tenant,
        project=project,
    )
    store.transact(lambda w: w.apply(Changeset(meta=meta, events=fresh)))

    replayed = 0
    for version, rec in records.items():
        try:
            fatal, problems = store.transact(
                partial(replay_one, version=version, rec=rec, txs=txs, moved=moved)
            )
        except (MorphzError, KeyError, TypeError, ValueError, AssertionError) as e:
            fatal, problems = True, [f"v{version}: replay failed: {type(e).__name__}: {e}"]
        out.extend(Violation(kind=REPLAY_DIVERGED, detail=p) for p in problems)
        if fatal:
            out.append(
                Violation(
                    kind=REPLAY_DIVERGED,
                    detail=f"replay stopped at v{version}; the final state was not compared",
                )
            )
            return replayed
        replayed += 1

    compare_state(store, events, final_frames, final_relations, out)
    return replayed


def replay_one(
    w: WriteView,
    *,
    version: int,
    rec: Mapping[str, Any],
    txs: Mapping[int, ContextTx],
    moved: dict[str, list[int]] | None = None,
) -> tuple[bool, list[str]]:
    """Replay one record; return (stop here?, problems). Writes only if it commits."""
    kind = rec.get("kind")
    tick = int_or_none(rec.get("tick"))
    time = rec.get("time")
    now = float(time) if isinstance(time, (int, float)) else 0.0
    if tick is None:
        return True, [f"v{version}: the record has no tick"]
    meta = w.meta().copy()
    meta.tick = tick
    w.apply(Changeset(meta=meta))
    if kind == "model":
        tx = txs.get(version)
        if tx is None:
            return True, []  # already reported as unreadable
        outcome = evaluate(w, tx, now=now, text=rec.get("text"))
        receipt = outcome.receipt
        if outcome.changes is None or receipt.version != version:
            why = ", ".join(f"{e.code}: {e.message}" for e in receipt.errors) or "not committed"
            return True, [
                f"v{version}: the logged transaction replays as {receipt.status} "
                f"at v{receipt.version} ({why})"
            ]
        changes = outcome.changes
        changes.client = None  # exactly-once is checked on the log itself, by (d)
    elif kind == "runtime":
        finalized, changes = finalize_due(w, tick=tick, now=now)
        logged = rec.get("finalize")
        if changes.txlog is None or changes.txlog["version"] != version:
            return True, [f"v{version}: the runtime record finalizes nothing on replay"]
        if plain(logged) != finalized:
            return True, [
                f"v{version}: the runtime record finalized {logged!r}; "
                f"the replay finalizes {finalized!r}"
            ]
    elif kind == "governance":
        from protocol.governance import replay_decisions

        _, decided = replay_decisions(w, rec)
        if decided is None or decided.txlog is None or decided.txlog["version"] != version:
            return True, [f"v{version}: the governance record does not replay"]
        changes = decided
    else:
        return True, [f"v{version}: unknown record kind {kind!r}"]
    assert changes.txlog is not None
    replayed_rec = changes.txlog
    if moved is not None:
        for key in field_moves(w, changes.frames):
            moved.setdefault(key, []).append(version)
    w.apply(changes)
    differing = [
        name
        for name in REPLAYED_FIELDS
        if name in rec or name in replayed_rec
        if plain(rec.get(name)) != plain(replayed_rec.get(name))
    ]
    if not differing:
        return False, []
    detail = f"v{version}: the replay differs from the log in {', '.join(differing)}"
    if "changes" in differing:
        detail += f" (changes {plain(replayed_rec.get('changes'))} on replay, "
        detail += f"{plain(rec.get('changes'))} logged)"
    return False, [detail]


def field_moves(before: ReadView, frames: list[Frame]) -> list[str]:
    """The field and lifecycle keys that writing *frames* over *before* really changes.

    Told from the frames as they stand before and after (a body compared field by
    field, a lifecycle and protection compared), not from what the engine recorded:
    an edit that leaves a field as it was changes nothing here.
    """
    keys: list[str] = []
    for f in frames:
        old = before.frame(f.id)
        names = changed_fields(None if old is None else old.body, f.body)
        if names is None:
            keys.append(shape_key(f.id))
        else:
            keys.extend(field_key(f.id, n) for n in sorted(names))
        if old is not None and (old.lifecycle != f.lifecycle or old.protected != f.protected):
            keys.append(lifecycle_key(f.id))
    return keys


def compare_state(
    store: MemoryBackend,
    events: list[Event],
    final_frames: list[Frame],
    final_relations: list[tuple[str, ...]],
    out: list[Violation],
) -> None:
    """Report where the replayed *store* differs from the final frames, relations, events."""

    def read(v: ReadView) -> tuple[list[Frame], list[tuple[str, str, str]], list[Event]]:
        return list(v.iter_frames()), list(v.iter_relations()), list(v.iter_events())

    frames, relations, replayed_events = store.read(read)

    mine = {f.id: f.to_record() for f in frames}
    theirs = {f.id: f.to_record() for f in final_frames}
    bad = sorted(i for i in mine.keys() | theirs.keys() if mine.get(i) != theirs.get(i))
    if bad:
        first = bad[0]
        a, b = mine.get(first), theirs.get(first)
        if a is None:
            why = "exists in the final state only"
        elif b is None:
            why = "exists after replay only"
        else:
            field = next(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            why = f"{field} is {a.get(field)!r} after replay, {b.get(field)!r} in the final state"
        more = f" (and {len(bad) - 1} more frame(s))" if len(bad) > 1 else ""
        out.append(Violation(kind=REPLAY_MISMATCH, detail=f"frame {first}: {why}{more}"))

    rel_mine, rel_theirs = set(relations), set(final_relations)
    rel_bad = sorted(rel_mine ^ rel_theirs)
    if rel_bad:
        first_rel = rel_bad[0]
        where = "after replay only" if first_rel in rel_mine else "in the final state only"
        out.append(
            Violation(
                kind=REPLAY_MISMATCH, detail=f"relation {' '.join(first_rel)}: exists {where}"
            )
        )

    ev_mine = {e.seq: (e.lifecycle, e.retired_version) for e in replayed_events}
    ev_theirs = {e.seq: (e.lifecycle, e.retired_version) for e in events}
    ev_bad = sorted(
        s for s in ev_mine.keys() | ev_theirs.keys() if ev_mine.get(s) != ev_theirs.get(s)
    )
    if ev_bad:
        seq = ev_bad[0]
        out.append(
            Violation(
                kind=REPLAY_MISMATCH,
                detail=f"event @e{seq}: (lifecycle, retired version) is {ev_mine.get(seq)} "
                f"after replay, {ev_theirs.get(seq)} in the final state",
            )
        )
