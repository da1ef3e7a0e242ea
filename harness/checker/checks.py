"""The history checker's entry point and properties (b)–(e); (a) is in :mod:`.replay`."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.checker.fields import check_field_edits
from harness.checker.log import (
    change_index,
    changed_between,
    changes_of,
    checked_keys,
    index_log,
    int_or_none,
    logged_txs,
)
from harness.checker.replay import replay
from harness.checker.verdicts import (
    DUPLICATE_APPLY,
    LOST_ACK,
    LOST_UPDATE,
    UNJUSTIFIED_CONFLICT,
    UNJUSTIFIED_TOO_OLD,
    Counts,
    Submission,
    Verdict,
    Violation,
)
from protocol.state import Event, Frame
from protocol.tx import ContextTx, key_display


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
    """Check a history of one context; see :mod:`harness.checker` for what is proved.

    *log* holds txlog records as the store returns them (any order);
    *events*, *final_frames* and *final_relations* are the context's state at
    the end of the history; *window*, *history_keep* and its scope (*tenant*,
    *project*: new frames take them into their envelope) its settings.
    Never raises on a malformed history: whatever cannot be read is reported.
    """
    subs = list(submissions)
    out: list[Violation] = []
    records, complete = index_log(list(log), out)
    txs = logged_txs(records, out)
    replayed = 0
    moved: dict[str, list[int]] = {}
    final_frames = list(final_frames)
    if complete:
        replayed = replay(
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
            moved=moved,
        )
    changed_at = change_index(records)
    acked = _check_acks(subs, records, out)
    _check_lost_updates(subs, acked, records, txs, changed_at, moved, out)
    check_field_edits(records, txs, list(final_frames), out)
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


# --- (b) lost updates ---------------------------------------------------------


def _check_lost_updates(
    subs: list[Submission],
    acked: set[tuple[str, int]],
    records: Mapping[int, Mapping[str, Any]],
    txs: Mapping[int, ContextTx],
    changed_at: Mapping[str, list[int]],
    moved: Mapping[str, list[int]],
    out: list[Violation],
) -> None:
    def check(keys: frozenset[str], base: int, version: int, who: str) -> None:
        for key in sorted(keys):
            shown = key_display(key)
            if key[:2] in ("b:", "l:"):
                # A field edit's keys: what really changed the field, the body's shape
                # or the lifecycle (from the replay), not every change of the frame.
                hit = changed_between(moved.get(key, []), base, version)
                what = key.partition("\x00")[2]
                if key[:2] == "l:":
                    shown = f"the lifecycle of {shown}"
                elif what:
                    shown = f"field {what} of {shown}"
                else:
                    shown = f"the whole body of {shown}"
            else:
                hit = changed_between(changed_at.get(shown, []), base, version)
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
        base = int_or_none(records[version].get("base_version"))
        if base is not None:
            check(checked_keys(tx), base, version, f"log record v{version}")


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
            elif shown not in changes_of(rec):
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
