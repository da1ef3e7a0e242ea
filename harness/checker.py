"""A checker of multi-threaded histories (R21–R25), in the spirit of Jepsen's Elle.

A history is what the clients saw — one :class:`Submission` per submitted
transaction, with its receipt or with no reply at all — together with what the
store kept: the transaction log, the events and the final state of frames and
relations. :func:`check_history` proves five properties of it and returns a
:class:`Verdict` listing every :class:`Violation` found:

(a) **Replay.** The log versions are exactly ``1..N``; replaying the log in
    version order on a fresh in-memory store re-commits every record at its
    version with the same changes, writes and receipt (``replay_diverged``),
    and ends in exactly the final state: every frame's full record, every
    relation, every event's lifecycle (``replay_mismatch``). A log that is not
    ``1..N`` is reported as ``log_gap`` and not replayed.
(b) **No lost update.** No committed transaction — neither a committed
    submission nor a model log record — has a footprint key changed by a
    version strictly between its base version and its commit version
    (``lost_update``). Event references cited as sources are not checked,
    exactly as the engine's conflict check skips them.
(c) **Justified rejections.** Each conflict a ``conflict`` rejection names is
    in the submission's footprint and was changed, according to the log, by
    the version named, after the base and no later than the rejection
    (``unjustified_conflict``). A ``too_old`` rejection really was more than
    ``history_keep`` versions behind (``unjustified_too_old``).
(d) **Exactly once.** No client id appears on more than one log record
    (``duplicate_apply``).
(e) **Durable acknowledgements.** Every committed submission's version is in
    the log under its client id, and every receipt for one client id names the
    same version (``lost_ack``). A submission with an unknown outcome may have
    committed at most once — (d) — and is otherwise not checked.

How the replay works: a fresh :class:`~storage.memory.MemoryBackend` gets the
context's window and ``history_keep`` and every event, reset to active and not
retired. User requests are marked delivered: delivery is not logged, so the
replay cannot know when it happened, and a logged retirement of a request
could only have committed after its delivery. Then, for each record in version
order, the tick moves to the record's tick; a ``model`` record's transaction
(parsed from its text, or from its dict form) is evaluated by
:func:`protocol.engine.evaluate` and a ``runtime`` record is replayed by
:func:`protocol.engine.finalize_due` at its tick. The replay store keeps no
client-id index, so a duplicate client id in the log is reported by (d) and
does not also derail the replay. The replay stops at the first record that
does not commit at its version or finalizes other frames; the final state is
then not compared.

Everything here is pure: no I/O, and the store is the in-memory one.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from protocol.engine import evaluate, finalize_due
from protocol.errors import MorphzError
from protocol.receipts import Receipt
from protocol.state import ACTIVE, Event, Frame, Meta
from protocol.tx import ContextTx, key_display
from protocol.txlang import parse_tx
from protocol.view import Changeset, ReadView, WriteView
from protocol.wire import tx_from_dict
from storage.memory import MemoryBackend

LOG_GAP = "log_gap"
"""The log's versions are not exactly 1..N, or a record has no usable version."""
REPLAY_DIVERGED = "replay_diverged"
"""A log record does not replay as logged (rejected, other version, other changes)."""
REPLAY_MISMATCH = "replay_mismatch"
"""Replaying the whole log does not end in the final state."""
LOST_UPDATE = "lost_update"
"""A committed transaction's footprint changed between its base and its commit."""
UNJUSTIFIED_CONFLICT = "unjustified_conflict"
"""A conflict rejection names no conflict, or one the log does not show."""
UNJUSTIFIED_TOO_OLD = "unjustified_too_old"
"""A ``too_old`` rejection of a base within the kept history."""
DUPLICATE_APPLY = "duplicate_apply"
"""One client id on more than one log record."""
LOST_ACK = "lost_ack"
"""An acknowledged commit that the log does not hold under its client id."""

VIOLATION_KINDS = (
    DUPLICATE_APPLY,
    LOG_GAP,
    LOST_ACK,
    LOST_UPDATE,
    REPLAY_DIVERGED,
    REPLAY_MISMATCH,
    UNJUSTIFIED_CONFLICT,
    UNJUSTIFIED_TOO_OLD,
)
"""Every kind of :class:`Violation` the checker reports."""

# The log-record fields a replay must reproduce; text, tx and time are inputs.
_REPLAYED_FIELDS = (
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


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Submission(_Model):
    """One submitted transaction as its client saw it.

    ``footprint`` holds the footprint keys of the transaction (reads and
    writes of :meth:`~protocol.tx.ContextTx.footprint`: ``f:<id>``,
    ``e:@eN``, ``r:<s>\\x00<label>\\x00<o>``); ``source_events`` are those of
    them that are event references read as ``from`` sources, which the
    conflict check ignores. ``outcome`` is ``unknown`` when no reply came
    (the actor died, the reply was lost). ``version`` is the commit version,
    or the context version at rejection. ``conflicts`` are the receipt's
    ``(display id, version)`` pairs, ``error_code`` the first error's code,
    ``duplicate`` whether the receipt was returned for a known client id.
    """

    client_id: str
    thread: str
    base_version: int
    footprint: tuple[str, ...]
    outcome: Literal["committed", "rejected", "unknown"]
    version: int | None = None
    conflicts: tuple[tuple[str, int], ...] = ()
    error_code: str | None = None
    duplicate: bool = False
    attempt: int = 1
    source_events: tuple[str, ...] = ()

    @classmethod
    def from_receipt(
        cls,
        client_id: str,
        thread: str,
        tx: ContextTx,
        receipt: Receipt,
        attempt: int = 1,
    ) -> Submission:
        """The submission of *tx* under *client_id* that got *receipt* back."""
        footprint, source_events = _footprint(tx)
        return cls(
            client_id=client_id,
            thread=thread,
            base_version=tx.base_version,
            footprint=footprint,
            source_events=source_events,
            outcome=receipt.status,
            version=receipt.version,
            conflicts=tuple((c.id, c.version) for c in receipt.conflicts),
            error_code=receipt.errors[0].code if receipt.errors else None,
            duplicate=receipt.duplicate,
            attempt=attempt,
        )

    @classmethod
    def unknown(cls, client_id: str, thread: str, tx: ContextTx, attempt: int = 1) -> Submission:
        """The submission of *tx* under *client_id* that got no reply."""
        footprint, source_events = _footprint(tx)
        return cls(
            client_id=client_id,
            thread=thread,
            base_version=tx.base_version,
            footprint=footprint,
            source_events=source_events,
            outcome="unknown",
            attempt=attempt,
        )

    def checked_keys(self) -> frozenset[str]:
        """The footprint keys a conflict check looks at: all but event sources."""
        return frozenset(self.footprint) - frozenset(self.source_events)


class Violation(_Model):
    """One property the history breaks: its kind (see :data:`VIOLATION_KINDS`) and why."""

    kind: str
    detail: str


class Counts(_Model):
    """Submissions by outcome (duplicates included), and log records replayed."""

    committed: int = 0
    rejected: int = 0
    unknown: int = 0
    replayed: int = 0


class Verdict(_Model):
    """The result of :func:`check_history`: ok exactly when no violation was found."""

    violations: list[Violation]
    counts: Counts

    @property
    def ok(self) -> bool:
        """True if the history satisfies every checked property."""
        return not self.violations

    def kinds(self) -> set[str]:
        """The kinds of the violations found."""
        return {v.kind for v in self.violations}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``ok``, ``counts`` and ``violations``."""
        return {
            "ok": self.ok,
            "counts": self.counts.model_dump(),
            "violations": [v.model_dump() for v in self.violations],
        }

    def summary(self) -> str:
        """One line: ok and the counts, or the violations by kind and the first one."""
        c = self.counts
        counts = (
            f"{c.committed} committed, {c.rejected} rejected, {c.unknown} unknown, "
            f"{c.replayed} log records replayed"
        )
        if self.ok:
            return f"ok: {counts}"
        by_kind = Counter(v.kind for v in self.violations)
        kinds = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(by_kind.items()))
        first = self.violations[0]
        return (
            f"{len(self.violations)} violation(s) ({kinds}) in {counts}; "
            f"first: {first.kind}: {first.detail}"
        )


def check_history(
    submissions: Iterable[Submission],
    log: Iterable[Mapping[str, Any]],
    *,
    events: Iterable[Event],
    final_frames: Iterable[Frame],
    final_relations: Iterable[Sequence[str]],
    window: int,
    history_keep: int,
    tenant: str | None = None,
    project: str | None = None,
) -> Verdict:
    """Check a history of one context; see the module docstring for what is proved.

    *log* holds txlog records as the store returns them (any order);
    *events*, *final_frames* and *final_relations* are the context's state at
    the end of the history; *window*, *history_keep* and its scope (*tenant*,
    *project*: new frames take them into their envelope) its settings.
    Never raises on a malformed history: whatever cannot be read is reported.
    """
    subs = list(submissions)
    out: list[Violation] = []
    records, complete = _index_log(list(log), out)
    txs = _logged_txs(records, out)
    replayed = 0
    if complete:
        replayed = _replay(
            records,
            txs,
            list(events),
            list(final_frames),
            [tuple(r) for r in final_relations],
            window,
            history_keep,
            out,
            tenant=tenant,
            project=project,
        )
    changed_at = _changed_at(records)
    acked = _check_acks(subs, records, out)
    _check_lost_updates(subs, acked, records, txs, changed_at, out)
    _check_rejections(subs, records, history_keep, out)
    _check_exactly_once(records, out)
    by_outcome = Counter(s.outcome for s in subs)
    counts = Counts(
        committed=by_outcome["committed"],
        rejected=by_outcome["rejected"],
        unknown=by_outcome["unknown"],
        replayed=replayed,
    )
    return Verdict(violations=out, counts=counts)


# --- the log ------------------------------------------------------------------


def _footprint(tx: ContextTx) -> tuple[tuple[str, ...], tuple[str, ...]]:
    reads, writes = tx.footprint()
    return (
        tuple(sorted(reads | writes)),
        tuple(sorted(k for k in reads if k.startswith("e:"))),
    )


def _checked_keys(tx: ContextTx) -> frozenset[str]:
    # Exactly what engine._conflicts looks at.
    reads, writes = tx.footprint()
    return writes | {k for k in reads if not k.startswith("e:")}


def _int(value: Any) -> int | None:
    """*value* if it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _index_log(
    log: list[Mapping[str, Any]], out: list[Violation]
) -> tuple[dict[int, Mapping[str, Any]], bool]:
    """The records by version, and whether the versions are exactly 1..N."""
    records: dict[int, Mapping[str, Any]] = {}
    complete = True
    for position, rec in enumerate(log):
        version = _int(rec.get("version")) if isinstance(rec, Mapping) else None
        if version is None or version < 1:
            out.append(Violation(kind=LOG_GAP, detail=f"log record #{position} has no version"))
            complete = False
            continue
        if version in records:
            out.append(Violation(kind=LOG_GAP, detail=f"two log records at v{version}"))
            complete = False
            continue
        records[version] = rec
    missing = sorted(set(range(1, max(records, default=0) + 1)) - records.keys())
    if missing:
        shown = ", ".join(f"v{v}" for v in missing[:5]) + (" …" if len(missing) > 5 else "")
        out.append(
            Violation(
                kind=LOG_GAP,
                detail=f"the log misses {len(missing)} version(s): {shown}; replay skipped",
            )
        )
        complete = False
    return dict(sorted(records.items())), complete


def _logged_txs(
    records: Mapping[int, Mapping[str, Any]], out: list[Violation]
) -> dict[int, ContextTx]:
    """The transaction of every model record, with the record's client id attached.

    A transaction committed with a client id given apart from its text is
    logged with that text, so the client id comes from the record.
    """
    txs: dict[int, ContextTx] = {}
    for version, rec in records.items():
        if rec.get("kind") != "model":
            continue
        try:
            if rec.get("text") is not None:
                tx = parse_tx(rec["text"])
            else:
                tx = tx_from_dict(rec.get("tx"))
        except (MorphzError, TypeError, ValueError) as e:
            out.append(
                Violation(kind=REPLAY_DIVERGED, detail=f"v{version}: unreadable transaction: {e}")
            )
            continue
        client_id = rec.get("client_id")
        if tx.client_id is None and isinstance(client_id, str) and client_id:
            tx = tx.model_copy(update={"client_id": client_id})
        if tx.client_id != client_id or tx.base_version != rec.get("base_version"):
            out.append(
                Violation(
                    kind=REPLAY_DIVERGED,
                    detail=f"v{version}: the logged transaction (base v{tx.base_version}, "
                    f"client id {tx.client_id!r}) disagrees with its record "
                    f"(base v{rec.get('base_version')}, client id {client_id!r})",
                )
            )
        txs[version] = tx
    return txs


def _changes(rec: Mapping[str, Any]) -> list[str]:
    changes = rec.get("changes")
    if not isinstance(changes, (list, tuple)):
        return []
    return [c for c in changes if isinstance(c, str)]


def _changed_at(records: Mapping[int, Mapping[str, Any]]) -> dict[str, list[int]]:
    """For each changed id (display form), the versions that changed it, ascending."""
    index: dict[str, list[int]] = defaultdict(list)
    for version, rec in records.items():  # records are sorted by version
        for key in dict.fromkeys(_changes(rec)):
            index[key].append(version)
    return index


def _changed_between(versions: list[int], after: int, before: int) -> int | None:
    """The first version strictly between *after* and *before*, if any."""
    i = bisect.bisect_right(versions, after)
    if i < len(versions) and versions[i] < before:
        return versions[i]
    return None


# --- (a) replay ---------------------------------------------------------------


def _plain(value: Any) -> Any:
    """*value* with tuples as lists, as a record reads back from the store."""
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _replay(
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
) -> int:
    """Replay the log on a fresh store; return the number of records replayed."""
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
                partial(_replay_one, version=version, rec=rec, txs=txs)
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

    _compare_state(store, events, final_frames, final_relations, out)
    return replayed


def _replay_one(
    w: WriteView, *, version: int, rec: Mapping[str, Any], txs: Mapping[int, ContextTx]
) -> tuple[bool, list[str]]:
    """Replay one record; return (stop here?, problems). Writes only if it commits."""
    kind = rec.get("kind")
    tick = _int(rec.get("tick"))
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
        if _plain(logged) != finalized:
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
    w.apply(changes)
    differing = [
        name
        for name in _REPLAYED_FIELDS
        if name in rec or name in replayed_rec
        if _plain(rec.get(name)) != _plain(replayed_rec.get(name))
    ]
    if not differing:
        return False, []
    detail = f"v{version}: the replay differs from the log in {', '.join(differing)}"
    if "changes" in differing:
        detail += f" (changes {_plain(replayed_rec.get('changes'))} on replay, "
        detail += f"{_plain(rec.get('changes'))} logged)"
    return False, [detail]


def _compare_state(
    store: MemoryBackend,
    events: list[Event],
    final_frames: list[Frame],
    final_relations: list[tuple[str, ...]],
    out: list[Violation],
) -> None:
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


# --- (b) lost updates ---------------------------------------------------------


def _check_lost_updates(
    subs: list[Submission],
    acked: set[tuple[str, int]],
    records: Mapping[int, Mapping[str, Any]],
    txs: Mapping[int, ContextTx],
    changed_at: Mapping[str, list[int]],
    out: list[Violation],
) -> None:
    def check(keys: frozenset[str], base: int, version: int, who: str) -> None:
        for key in sorted(keys):
            shown = key_display(key)
            hit = _changed_between(changed_at.get(shown, []), base, version)
            if hit is not None:
                out.append(
                    Violation(
                        kind=LOST_UPDATE,
                        detail=f"{who} committed at v{version} from base v{base}, "
                        f"but v{hit} changed {shown} in between",
                    )
                )

    seen: set[tuple[str, int]] = set()
    for s in subs:
        # A commit the log does not hold is a lost ack, not a lost update.
        if s.outcome != "committed" or s.version is None or (s.client_id, s.version) not in acked:
            continue
        if (s.client_id, s.version) in seen:
            continue
        seen.add((s.client_id, s.version))
        who = f"submission {s.client_id!r} (thread {s.thread}, attempt {s.attempt})"
        check(s.checked_keys(), s.base_version, s.version, who)

    for version, tx in txs.items():
        base = _int(records[version].get("base_version"))
        if base is not None:
            check(_checked_keys(tx), base, version, f"log record v{version}")


# --- (c) rejections -----------------------------------------------------------


def _check_rejections(
    subs: list[Submission],
    records: Mapping[int, Mapping[str, Any]],
    history_keep: int,
    out: list[Violation],
) -> None:
    for s in subs:
        if s.outcome != "rejected":
            continue
        who = f"submission {s.client_id!r} (thread {s.thread}, attempt {s.attempt})"
        if s.error_code == "too_old":
            if s.version is not None and s.version - s.base_version <= history_keep:
                out.append(
                    Violation(
                        kind=UNJUSTIFIED_TOO_OLD,
                        detail=f"{who} was rejected too_old at v{s.version} from base "
                        f"v{s.base_version}, within the {history_keep} versions kept",
                    )
                )
            continue
        if s.error_code != "conflict":
            continue
        if not s.conflicts:
            out.append(
                Violation(
                    kind=UNJUSTIFIED_CONFLICT,
                    detail=f"{who} was rejected for a conflict naming none",
                )
            )
            continue
        footprint = {key_display(k) for k in s.checked_keys()}
        for shown, version in s.conflicts:
            rec = records.get(version)
            why = None
            if shown not in footprint:
                why = f"{shown} is not in its footprint"
            elif version <= s.base_version:
                why = f"v{version} is not after its base v{s.base_version}"
            elif s.version is not None and version > s.version:
                why = f"v{version} is after the rejection at v{s.version}"
            elif rec is None:
                why = f"v{version} is not in the log"
            elif shown not in _changes(rec):
                why = f"v{version} did not change {shown}"
            if why is not None:
                out.append(
                    Violation(
                        kind=UNJUSTIFIED_CONFLICT,
                        detail=f"{who} was rejected for a conflict on {shown} at v{version}, "
                        f"but {why}",
                    )
                )


# --- (d) exactly once, (e) durable acknowledgements ----------------------------


def _check_exactly_once(records: Mapping[int, Mapping[str, Any]], out: list[Violation]) -> None:
    versions: dict[str, list[int]] = defaultdict(list)
    for version, rec in records.items():
        client_id = rec.get("client_id")
        if isinstance(client_id, str):
            versions[client_id].append(version)
    for client_id, at in sorted(versions.items()):
        if len(at) > 1:
            shown = ", ".join(f"v{v}" for v in at)
            out.append(
                Violation(
                    kind=DUPLICATE_APPLY, detail=f"client id {client_id!r} is applied at {shown}"
                )
            )


def _check_acks(
    subs: list[Submission], records: Mapping[int, Mapping[str, Any]], out: list[Violation]
) -> set[tuple[str, int]]:
    """Check (e); return the ``(client id, version)`` acknowledgements the log holds."""
    acked: set[tuple[str, int]] = set()
    named: dict[str, set[int]] = defaultdict(set)
    for s in subs:
        if s.outcome != "committed":
            continue
        who = f"submission {s.client_id!r} (thread {s.thread}, attempt {s.attempt})"
        if s.version is None:
            out.append(Violation(kind=LOST_ACK, detail=f"{who} was acknowledged without a version"))
            continue
        named[s.client_id].add(s.version)
        rec = records.get(s.version)
        if rec is None:
            out.append(
                Violation(
                    kind=LOST_ACK,
                    detail=f"{who} was acknowledged at v{s.version}, which the log does not hold",
                )
            )
        elif rec.get("client_id") != s.client_id:
            out.append(
                Violation(
                    kind=LOST_ACK,
                    detail=f"{who} was acknowledged at v{s.version}, but the log holds "
                    f"client id {rec.get('client_id')!r} there",
                )
            )
        else:
            acked.add((s.client_id, s.version))
    for client_id, versions in sorted(named.items()):
        if len(versions) > 1:
            shown = ", ".join(f"v{v}" for v in sorted(versions))
            out.append(
                Violation(
                    kind=LOST_ACK,
                    detail=f"receipts for client id {client_id!r} name different versions: {shown}",
                )
            )
    return acked
