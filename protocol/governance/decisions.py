"""Governance decisions as recorded runtime transactions, applied inside one write view.

* :func:`decide` turns accept/reject/quarantine rulings into one recorded
  runtime transaction (log kind ``governance``): trust and ``reviewed_by``
  change, a rejected frame is retired at once (its records stay in history);
  :func:`replay_decisions` rebuilds it from its log record.
* :func:`decide_in`, :func:`admit_in` and :func:`review_in` apply decisions
  inside a :class:`~protocol.view.WriteView` together with their audit entry,
  so a store's write transaction holds both. Time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol.errors import NotFound, RequestError
from protocol.governance.audit import audit_entry
from protocol.governance.policy import (
    REVIEWABLE,
    AdmissionPolicy,
    Decision,
    admission_decisions,
)
from protocol.receipts import Receipt
from protocol.sexpr import print_form
from protocol.state import ACCEPTED, CANDIDATE, QUARANTINED, REJECTED, RETIRED, RETIRING
from protocol.tx import key_display
from protocol.view import Changeset, ReadView, WriteView

_TRUST_OF = {"accept": ACCEPTED, "reject": REJECTED, "quarantine": QUARANTINED}


def decide(
    view: ReadView, decisions: Sequence[Decision | Any], *, now: float, reason: str
) -> tuple[Receipt | None, Changeset | None]:
    """Apply accept/reject (and ``quarantine``) rulings as one recorded runtime transaction.

    Holds change nothing. Accept sets trust ``accepted``; reject sets trust
    ``rejected`` and retires the frame now (R42: versions, never deletion);
    quarantine sets trust ``quarantined`` (R43). Each sets ``reviewed_by`` (the
    decision's reviewer) and ``review_reasons``. Returns ``(None, None)`` when
    nothing changes; else the receipt and the changeset (version + 1, log
    kind ``governance`` with the decisions, so a replay can re-apply them).
    """
    meta = view.meta()
    version = meta.version + 1
    cs = Changeset()
    applied: list[dict[str, Any]] = []
    retired: list[str] = []
    for d in decisions:
        trust = _TRUST_OF.get(d.verdict)
        if trust is None:
            continue
        f = view.frame(d.frame_id)
        if f is None:
            continue
        w = f.copy()
        w.envelope["trust"] = trust
        w.envelope["reviewed_by"] = d.reviewer
        w.envelope["review_reasons"] = list(d.reasons)
        if trust == REJECTED and w.lifecycle != RETIRED:
            if w.lifecycle == RETIRING and w.due_tick is not None:
                cs.due_del.append((w.due_tick, w.id))
            w.lifecycle = RETIRED
            w.protected = False
            w.due_tick = None
            w.marked_tick = None
            w.retired_version = version
            retired.append(w.id)
        w.updated_version = version
        cs.frames.append(w)
        cs.history.append((w.id, version))
        applied.append(d.to_dict())
    if not cs.frames:
        return None, None
    new_meta = meta.copy()
    new_meta.version = version
    cs.meta = new_meta
    changed = ["f:" + f.id for f in cs.frames]
    cs.lastmod = dict.fromkeys(changed, version)
    receipt = Receipt(
        status="committed",
        version=version,
        base_version=meta.version,
        tick=meta.tick,
        retired_now=tuple(retired),
    )
    cs.txlog = {
        "version": version,
        "kind": "governance",
        "base_version": meta.version,
        "client_id": None,
        "reason": reason,
        "text": _governance_text(meta.version, reason, applied),
        "tx": None,
        "time": now,
        "tick": meta.tick,
        "changes": [key_display(k) for k in changed],
        "writes": [{"frame": d["frame"], "op": d["verdict"]} for d in applied],
        "decisions": applied,
        "receipt": receipt.to_dict(),
    }
    cs.outbox = {"version": version, "frames": [f.id for f in cs.frames], "events": []}
    return receipt, cs


def replay_decisions(
    view: ReadView, record: Mapping[str, Any]
) -> tuple[Receipt | None, Changeset | None]:
    """The changeset a ``governance`` log record makes when replayed against *view*."""
    ds = [
        Decision(d["frame"], d["verdict"], tuple(d.get("reasons") or ()), d.get("reviewer", ""))
        for d in record.get("decisions") or ()
    ]
    return decide(view, ds, now=float(record.get("time") or 0.0), reason=record.get("reason", ""))


def _governance_text(base: int, reason: str, applied: list[dict[str, Any]]) -> str:
    lines = ["(runtime-tx", f"  (base-version {base})", f"  (reason {print_form(reason)})"]
    for d in applied:
        lines.append(f"  ({d['verdict']} {d['frame']} (reviewed-by {print_form(d['reviewer'])}))")
    lines[-1] += ")"
    return "\n".join(lines)


def decision_audit(
    audit: Mapping[str, Any] | None, ds: Sequence[Decision], version: int, when: float
) -> list[dict[str, Any]]:
    """The audit entry of decisions *ds* committed at *version* (none without a template)."""
    if audit is None:
        return []
    changed = [d for d in ds if d.verdict != "hold"]
    why = ", ".join(f"{d.verdict} {d.frame_id}" for d in changed)
    return [
        {
            **audit,
            **audit_entry(
                str(audit.get("method", "governance")),
                str(audit.get("op", "admin")),
                holder=audit.get("holder"),
                allowed=True,
                why=why,
                at=when,
            ),
            "version": version,
            "decisions": [
                {"frame": d.frame_id, "verdict": d.verdict, "reviewer": d.reviewer} for d in changed
            ],
        }
    ]


def decide_in(
    w: WriteView,
    ds: Sequence[Decision],
    *,
    now: float,
    reason: str,
    audit: Mapping[str, Any] | None,
) -> int | None:
    """Apply *ds* (holds change nothing) and their audit entry; the new version or None."""
    receipt, cs = decide(w, ds, now=now, reason=reason)
    if cs is None or receipt is None:
        return None
    cs.audit.extend(decision_audit(audit, ds, receipt.version, now))
    w.apply(cs)
    return receipt.version


def admit_in(
    w: WriteView,
    policy: AdmissionPolicy,
    frame_id: str | None,
    *,
    now: float,
    audit: Mapping[str, Any] | None,
) -> tuple[list[Decision], int | None]:
    """Admission by *policy* inside *w*: every decision (holds included) and the version
    its accepts and rejects committed at (None when nothing changed).

    NotFound for an unknown *frame_id*, ``not_candidate`` for a frame that is not
    a candidate (or retired); nothing changes then.
    """
    if frame_id is not None:
        f = w.frame(frame_id)
        if f is None:
            raise NotFound(f"no frame {frame_id!r}")
        if f.trust != CANDIDATE or f.lifecycle == RETIRED:
            raise RequestError(
                f"{frame_id} is {f.trust}, not a candidate: admission decides candidates",
                code="not_candidate",
            )
    ds = admission_decisions(w, policy, frame_id)
    version = decide_in(w, ds, now=now, reason=f"admission by policy:{policy.name}", audit=audit)
    return ds, version


def review_in(
    w: WriteView,
    frame_id: str,
    decision: str,
    reviewer: str,
    *,
    reason: str | None,
    now: float,
    audit: Mapping[str, Any] | None,
) -> tuple[Decision, int]:
    """A human decision on a candidate or quarantined frame inside *w*, with its audit entry.

    ``reviewed_by`` is ``human:<reviewer>``; *reason* joins the review reasons.
    NotFound for an unknown frame, ``not_reviewable`` for one that is neither a
    candidate nor quarantined (or is retired); nothing changes then.
    """
    f = w.frame(frame_id)
    if f is None:
        raise NotFound(f"no frame {frame_id!r}")
    if f.trust not in REVIEWABLE or f.lifecycle == RETIRED:
        raise RequestError(
            f"{frame_id} is {f.trust}; only candidates and quarantined frames are reviewed",
            code="not_reviewable",
        )
    why = (f"human review of a {f.trust} frame", *((reason,) if reason else ()))
    d = Decision(frame_id, "accept" if decision == "accept" else "reject", why, "human:" + reviewer)
    version = decide_in(w, [d], now=now, reason=f"review by human:{reviewer}", audit=audit)
    assert version is not None
    return d, version
