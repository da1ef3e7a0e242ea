"""Memory governance (R41–R43): admission of candidates, review, and quarantine.

Pure rules over a :class:`~protocol.view.ReadView`; nothing here does I/O.

* An :class:`AdmissionPolicy` reviews one candidate frame and returns a
  :class:`Decision` (``accept``, ``reject`` or ``hold``). :class:`DefaultPolicy`
  checks source, scope, sensitive content, conflicts and risk (R42).
* :func:`decide` turns accept/reject/quarantine verdicts into one recorded
  runtime transaction (log kind ``governance``): trust and ``reviewed_by``
  change, a rejected frame is retired at once (its records stay in history).
* :func:`find_low_quality` is the unattended check of R43: frames contradicted
  by later evidence, procedures whose last uses failed, frames nobody used.
* :func:`pending` lists what awaits a human, computed read-only (a dry run of
  the policy, plus the quarantined frames).
* The durable audit log: :func:`audit_entry` builds a record,
  :func:`append_audit` is the one append rule both stores run inside a write
  (refusals coalesce and are capped), :func:`read_audit` pages it back.
* :func:`run_admission`, :func:`run_review`, :func:`run_quarantine_scan` and
  :func:`run_pass` (and :func:`run_quarantine`, a quarantine by request) decide
  through a store's ``transact`` and write their audit entry in the same write
  (:func:`audit_template` is the entry's shape); ``Context.admit``, ``review``
  and ``quarantine`` are thin calls to them.
* The unattended pass is decided on a read (:func:`plan_pass`) and written
  only when it decided something, each decision re-checked against the current
  frame (:func:`apply_pass`); from a :class:`PassCursor` it looks only at what
  changed since the last pass. :class:`GovernanceWorker` runs it periodically
  beside an embedded :class:`~service.context.Context`, the context actor on
  its store thread.

See ``docs/governance.md`` for the decisions behind these rules.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.ids import SUPERSEDES
from protocol.receipts import Receipt
from protocol.state import (
    ACCEPTED,
    ACTIVE,
    CANDIDATE,
    QUARANTINED,
    REJECTED,
    RETIRED,
    RETIRING,
    Frame,
)
from protocol.tx import key_display
from protocol.view import BatchView, Changeset, ReadView, WriteView

if TYPE_CHECKING:
    from service.context import Backend

log = logging.getLogger("morphz.governance")

Verdict = Literal["accept", "reject", "hold", "quarantine"]
"""Admission verdicts are the first three; ``quarantine`` is the runtime's (R43)."""
CONTRADICTS = "contradicts"
"""The relation label that marks later evidence against a frame (R43)."""
REVIEWABLE = frozenset({CANDIDATE, QUARANTINED})
"""Trust statuses a review (policy or human) may decide."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one frame and why; ``reviewer`` is who decided."""

    frame_id: str
    verdict: Verdict
    reasons: tuple[str, ...] = ()
    reviewer: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "frame": self.frame_id,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "reviewer": self.reviewer,
        }


class AdmissionPolicy(Protocol):
    """Decides whether a candidate enters long-term memory (R42). ``name`` goes in reviewed_by."""

    name: str

    def review(self, frame: Frame, view: ReadView) -> Decision:
        """The decision on *frame*, judged against *view*."""
        ...


SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("api key (sk-…)", re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("private key block", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    (
        "password or secret in key=value",
        re.compile(r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|token)\s*[=:]\s*\S{3,}"),
    ),
)
"""Secrets a frame must not carry into long-term memory."""

PERSONAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("email address", re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+\b")),
    (
        "phone number",
        re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[\s.\-]?\(?\d{1,4}\)?(?:[\s.\-]?\d{2,4}){2,4}"
            r"|\(\d{3}\)\s?\d{3}-\d{4}|\d{3}-\d{3}-\d{4}|1[3-9]\d{9})(?!\w)"
        ),
    ),
)
"""Personal data: emails and phone numbers (cards are checked with Luhn)."""

_CARD = re.compile(r"(?<!\d)(?:\d[ \-]?){12,18}\d(?!\d)")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def sensitive_findings(text: str) -> list[str]:
    """What sensitive content *text* holds: secrets, emails, phones, card-like numbers."""
    found = [name for name, rx in SECRET_PATTERNS if rx.search(text)]
    found += [name for name, rx in PERSONAL_PATTERNS if rx.search(text)]
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and _luhn(digits):
            found.append("payment card number")
            break
    return found


def body_text(f: Frame) -> str:
    """A frame body as text, for content checks."""
    from protocol.txlang import print_form

    return " ".join(print_form(x) for x in f.body)


class DefaultPolicy:
    """The default admission checks of R42, in this order (rejections win over holds).

    * source: every source exists, none is rejected (reject); a source frame
      still under review holds the frame;
    * scope: tenant and project equal the context's (reject);
    * sensitive content: secrets or personal data in the body (reject);
    * conflicts: an accepted, unretired frame with a shared retrieval key and
      a different body, that this frame does not supersede (hold);
    * risk: ``high`` waits for a human (hold).
    """

    def __init__(self, name: str = "default-admission-v1") -> None:
        self.name = name

    def review(self, frame: Frame, view: ReadView) -> Decision:
        """See the class docstring."""
        reject: list[str] = []
        hold: list[str] = []
        for src in frame.sources:
            if src.startswith("ev:"):
                if view.event_seq(src) is None:
                    reject.append(f"source {src} does not exist")
                continue
            s = view.frame(src)
            if s is None:
                reject.append(f"source {src} does not exist")
            elif s.trust == REJECTED:
                reject.append(f"source {src} was rejected")
            elif s.trust != ACCEPTED:
                hold.append(f"source {src} is {s.trust}, not yet accepted")
        meta = view.meta()
        env = frame.envelope
        scope = (env.get("tenant"), env.get("project"))
        if scope != (meta.tenant, meta.project):
            reject.append(
                f"scope {scope[0]}/{scope[1]} is not the context's {meta.tenant}/{meta.project}"
            )
        reject.extend(f"sensitive content: {name}" for name in sensitive_findings(body_text(frame)))
        keys = set(env.get("keys") or ())
        if keys:
            superseded = {o for lab, o in view.relations_from(frame.id) if lab == SUPERSEDES}
            for other in view.iter_frames():
                if (
                    other.id == frame.id
                    or other.id in superseded
                    or other.trust != ACCEPTED
                    or other.lifecycle == RETIRED
                ):
                    continue
                shared = keys & set(other.envelope.get("keys") or ())
                if shared and other.body != frame.body:
                    hold.append(f"conflicts with accepted {other.id} on key {sorted(shared)[0]}")
        if env.get("risk") == "high":
            hold.append("high risk: waits for a human decision")
        reviewer = "policy:" + self.name
        if reject:
            return Decision(frame.id, "reject", tuple(reject), reviewer)
        if hold:
            return Decision(frame.id, "hold", tuple(hold), reviewer)
        return Decision(frame.id, "accept", ("all admission checks passed",), reviewer)


def candidates(view: ReadView, frame_id: str | None = None) -> list[Frame]:
    """The candidate frames not retired, oldest first (or just *frame_id* if it is one)."""
    if frame_id is not None:
        f = view.frame(frame_id)
        return [f] if f is not None and f.trust == CANDIDATE and f.lifecycle != RETIRED else []
    out = [f for f in view.iter_frames() if f.trust == CANDIDATE and f.lifecycle != RETIRED]
    out.sort(key=lambda f: (f.created_version, f.id))
    return out


_TRUST_OF = {"accept": ACCEPTED, "reject": REJECTED, "quarantine": QUARANTINED}


def decide(
    view: ReadView, decisions: Sequence[Decision | Any], *, now: float, reason: str
) -> tuple[Receipt | None, Changeset | None]:
    """Apply accept/reject (and ``quarantine``) verdicts as one recorded runtime transaction.

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
    from protocol.txlang import print_form

    lines = ["(runtime-tx", f"  (base-version {base})", f"  (reason {print_form(reason)})"]
    for d in applied:
        lines.append(f"  ({d['verdict']} {d['frame']} (reviewed-by {print_form(d['reviewer'])}))")
    lines[-1] += ")"
    return "\n".join(lines)


# -- quarantine (R43) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """A low-quality memory: which frame, which rule (``contradicted``,
    ``failing_procedure``, ``unused``) and why."""

    frame_id: str
    rule: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form."""
        return {"frame": self.frame_id, "rule": self.rule, "detail": self.detail}


def find_low_quality(
    view: ReadView,
    *,
    now_tick: int,
    unused_ticks: int | None = None,
    usage: Iterable[Mapping[str, Any]] = (),
    failed_uses: int = 3,
) -> list[Finding]:
    """Accepted, active, unprotected frames that look wrong or dead (R43).

    * ``contradicted``: a later accepted frame, not retired, relates to it with
      ``contradicts`` or ``supersedes`` while it is still active;
    * ``failing_procedure``: a ``procedural`` frame whose last *failed_uses*
      uses (traces citing it under ``cited`` with an ``outcome``) all failed;
    * ``unused`` (only with *unused_ticks*): no traced call had it in
      ``frames_present`` during the last *unused_ticks* ticks, and it is at least
      that old.

    *usage* is the traces, oldest first (``Context.traces()``). Pure; the caller
    decides whether to quarantine what it finds.
    """
    last_seen, outcomes = _usage(usage)
    out: list[Finding] = []
    for f in sorted(view.iter_frames(), key=_age):
        if _scanned(f):
            out.extend(
                _findings(
                    view,
                    f,
                    now_tick=now_tick,
                    unused_ticks=unused_ticks,
                    last_seen=last_seen,
                    outcomes=outcomes,
                    failed_uses=failed_uses,
                )
            )
    return out


def _age(f: Frame) -> tuple[int, str]:
    return (f.created_version, f.id)


def _scanned(f: Frame) -> bool:
    """Whether the quarantine rules look at *f*: accepted, active, unprotected."""
    return f.trust == ACCEPTED and f.lifecycle == ACTIVE and not f.protected


def _usage(
    traces: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, int], dict[str, list[str]]]:
    """From traces, oldest first: the last tick each frame was present in an input,
    and the outcomes of each frame's cited uses, in order."""
    last_seen: dict[str, int] = {}
    outcomes: dict[str, list[str]] = {}
    for t in traces:
        tick = t.get("tick")
        if isinstance(tick, int):
            for fid in t.get("frames_present") or ():
                last_seen[fid] = max(last_seen.get(fid, tick), tick)
        outcome = t.get("outcome")
        if outcome in ("ok", "failed"):
            for fid in t.get("cited") or ():
                outcomes.setdefault(fid, []).append(outcome)
    return last_seen, outcomes


def _findings(
    view: ReadView,
    f: Frame,
    *,
    now_tick: int,
    unused_ticks: int | None,
    last_seen: Mapping[str, int],
    outcomes: Mapping[str, Sequence[str]],
    failed_uses: int,
) -> list[Finding]:
    """The findings of :func:`find_low_quality` on one frame that :func:`_scanned` admits."""
    out: list[Finding] = []
    for s, label in view.relations_to(f.id):
        if label not in (CONTRADICTS, SUPERSEDES):
            continue
        later = view.frame(s)
        if (
            later is not None
            and later.trust == ACCEPTED
            and later.lifecycle != RETIRED
            and later.created_version > f.created_version
        ):
            out.append(Finding(f.id, "contradicted", f"{s} {label} {f.id}"))
            break
    uses = outcomes.get(f.id, ())
    if (
        f.kind == "procedural"
        and failed_uses > 0
        and len(uses) >= failed_uses
        and all(u == "failed" for u in uses[-failed_uses:])
    ):
        out.append(Finding(f.id, "failing_procedure", f"its last {failed_uses} uses failed"))
    if unused_ticks is not None:
        born = f.envelope.get("created_tick") or 0
        seen = last_seen.get(f.id, born)
        if now_tick - seen >= unused_ticks and now_tick - born >= unused_ticks:
            out.append(
                Finding(f.id, "unused", f"not in any traced input for {now_tick - seen} ticks")
            )
    return out


# -- what awaits a human -----------------------------------------------------------

MAX_PENDING_BODY = 240
"""Characters of a frame's printed body a pending item shows."""


def admission_decisions(
    view: ReadView, policy: AdmissionPolicy, frame_id: str | None = None
) -> list[Decision]:
    """*policy*'s decision on each candidate (or just *frame_id*), oldest first; writes nothing."""
    reviewer = "policy:" + policy.name
    out = [policy.review(f, view) for f in candidates(view, frame_id)]
    return [d if d.reviewer else replace(d, reviewer=reviewer) for d in out]


def pending(view: ReadView, policy: AdmissionPolicy | None = None) -> list[dict[str, Any]]:
    """What governance has not settled, computed read-only (a dry run of *policy*).

    One item per unretired candidate and quarantined frame, oldest first:
    ``{"frame", "trust", "awaits", "verdict", "reasons", "reviewed_by", "kind",
    "risk", "created_version", "updated_version", "body"}``. ``awaits`` is
    ``human`` for a candidate the policy would hold and for a quarantined frame
    (its reasons are the findings that put it there), ``admission`` for a
    candidate the policy would accept or reject on the next ``admit``.
    """
    pol: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
    out: list[dict[str, Any]] = []
    for d in admission_decisions(view, pol):
        f = view.frame(d.frame_id)
        if f is not None:
            awaits = "human" if d.verdict == "hold" else "admission"
            out.append(_pending_item(f, awaits, d.verdict, d.reasons, d.reviewer))
    held = [f for f in view.iter_frames() if f.trust == QUARANTINED and f.lifecycle != RETIRED]
    for f in sorted(held, key=lambda f: (f.created_version, f.id)):
        reasons = tuple(f.envelope.get("review_reasons") or ())
        by = f.envelope.get("reviewed_by") or ""
        out.append(_pending_item(f, "human", "quarantine", reasons, by))
    return out


def _pending_item(
    f: Frame, awaits: str, verdict: str, reasons: Sequence[str], reviewer: str
) -> dict[str, Any]:
    body = body_text(f)
    if len(body) > MAX_PENDING_BODY:
        body = body[: MAX_PENDING_BODY - 1] + "…"
    return {
        "frame": f.id,
        "trust": f.trust,
        "awaits": awaits,
        "verdict": verdict,
        "reasons": list(reasons),
        "reviewed_by": reviewer or None,
        "kind": f.kind,
        "risk": f.envelope.get("risk"),
        "created_version": f.created_version,
        "updated_version": f.updated_version,
        "body": body,
    }


# -- the durable audit log ---------------------------------------------------------

AUDIT_WINDOW = 60.0
"""Seconds within which identical refused entries coalesce into one row with a count."""
AUDIT_REFUSALS_PER_WINDOW = 100
"""New refused rows one window may add; later refusals of that window share one flood row."""
MAX_AUDIT_REFUSALS = 100_000
"""Refused rows a context keeps; beyond, the oldest refused rows are dropped."""
MAX_AUDIT_PAGE = 1000
"""Most audit entries one read returns."""
MAX_AUDIT_TEXT = 512
"""Characters of an audit entry's ``why`` (and of its holder) that are kept."""
_FLOOD = "\x00flood"


class AuditRows(Protocol):
    """The audit table as a store offers it inside one write transaction.

    Sequence numbers are positive; the state record keeps the append rule's
    bookkeeping (last number, the current window, counters).
    """

    def get(self, seq: int) -> dict[str, Any] | None:
        """The record numbered *seq*, or None."""

    def put(self, seq: int, record: dict[str, Any]) -> None:
        """Write (or overwrite) the record numbered *seq*."""

    def delete(self, seq: int) -> None:
        """Drop the record numbered *seq*."""

    def after(self, seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """Records numbered above *seq*, ascending."""

    def state(self) -> dict[str, Any] | None:
        """The append rule's state record, or None before the first append."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Replace the state record."""


def audit_entry(
    method: str,
    op: str,
    *,
    holder: str | None,
    allowed: bool,
    why: str,
    outcome: str | None = None,
    at: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One audit record: who (*holder*, as the capability claims it) called *method*
    (operation *op*), whether it was *allowed*, the *outcome* word (``allowed``,
    ``denied``, ``refused``, ``error``) and *why*; *extra* fields (context,
    tenant, version, decisions …) are kept as given (msgpack types only)."""
    when = time.time() if at is None else float(at)
    return {
        **extra,
        "time": when,
        "last_time": when,
        "count": 1,
        "holder": None if holder is None else str(holder)[:MAX_AUDIT_TEXT],
        "method": str(method),
        "op": str(op),
        "outcome": outcome or ("allowed" if allowed else "denied"),
        "allowed": bool(allowed),
        "why": str(why)[:MAX_AUDIT_TEXT],
    }


def append_audit(
    rows: AuditRows,
    records: Iterable[Mapping[str, Any]],
    *,
    window: float = AUDIT_WINDOW,
    per_window: int = AUDIT_REFUSALS_PER_WINDOW,
    keep: int = MAX_AUDIT_REFUSALS,
) -> list[int]:
    """Append *records* (see :func:`audit_entry`); the sequence number each landed on.

    Entries of what happened (``allowed``) each get a row and are never dropped.
    Refused entries (denials, refusals, errors) can be produced without bound by
    a caller without rights, so:

    * identical ones (holder, method, op, outcome, why) within one *window*
      of seconds share one row, whose ``count`` and ``last_time`` grow;
    * one window adds at most *per_window* refused rows; the rest of its
      refusals are counted in one flood row (holder None, method ``*``);
    * at most *keep* refused rows are kept; the oldest go first.

    So a flood adds at most ``per_window + 1`` rows per window and the table
    never holds more than *keep* refused rows. Sequence numbers are never reused.
    """
    st = _audit_state(rows.state())
    keys: dict[str, int] = st["keys"]
    out: list[int] = []
    for given in records:
        rec = dict(given)
        rec.setdefault("time", time.time())
        rec.setdefault("last_time", rec["time"])
        rec.setdefault("count", 1)
        rec["allowed"] = bool(rec.get("allowed"))
        rec["why"] = str(rec.get("why", ""))[:MAX_AUDIT_TEXT]
        if rec["allowed"]:
            st["last"] += 1
            rows.put(st["last"], rec)
            out.append(st["last"])
            continue
        at = float(rec["time"])
        if not st["window"] <= at < st["window"] + window:
            st["window"], st["new"] = at, 0
            keys.clear()
        key = "\x00".join(str(rec.get(k)) for k in ("holder", "method", "op", "outcome", "why"))
        if key not in keys and st["new"] >= per_window:
            key = _FLOOD
        seq = keys.get(key)
        old = None if seq is None else rows.get(seq)
        if seq is not None and old is not None:
            old["count"] = int(old.get("count") or 1) + int(rec["count"])
            old["last_time"] = max(float(old.get("last_time") or at), at)
            rows.put(seq, old)
            out.append(seq)
            continue
        if key == _FLOOD:
            rec.update(
                holder=None,
                method="*",
                op="*",
                why=f"more than {per_window} different refusals within {window:g} s;"
                " the rest of the window is counted here",
            )
        else:
            st["new"] += 1
        st["last"] += 1
        rows.put(st["last"], rec)
        keys[key] = st["last"]
        st["refusals"] += 1
        out.append(st["last"])
    if st["refusals"] > keep:
        drop: list[int] = []
        for seq, old in rows.after(st["pruned"]):
            if st["refusals"] - len(drop) <= keep:
                break
            if not old.get("allowed"):
                drop.append(seq)
            st["pruned"] = seq
        for seq in drop:
            rows.delete(seq)
        st["refusals"] -= len(drop)
        gone = set(drop)
        st["keys"] = {k: s for k, s in keys.items() if s not in gone}
    rows.set_state(st)
    return out


def _audit_state(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    st = dict(raw or {})
    return {
        "last": int(st.get("last") or 0),
        "window": float(st.get("window") or 0.0),
        "new": int(st.get("new") or 0),
        "keys": dict(st.get("keys") or {}),
        "refusals": int(st.get("refusals") or 0),
        "pruned": int(st.get("pruned") or 0),
    }


class AuditStore(Protocol):
    """A store that keeps an audit table: both backends (``MemoryBackend``, ``LmdbStore``)."""

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered above *after*, ascending."""
        ...


def check_page(after: object, limit: object, *, most: int = MAX_AUDIT_PAGE) -> tuple[int, int]:
    """*after* (an integer >= 0) and *limit* (1 to *most*) of a paged read, or a typed error."""
    for value, what in ((after, "after"), (limit, "limit")):
        if not isinstance(value, int) or isinstance(value, bool):
            raise RequestError(
                f"{what} must be an integer, not {type(value).__name__}", code="bad_argument"
            )
    assert isinstance(after, int) and isinstance(limit, int)
    if not 0 <= after < 1 << 63:
        raise OutOfRange(f"after must be between 0 and 2**63-1, not {after}")
    if not 1 <= limit <= most:
        raise OutOfRange(f"limit must be between 1 and {most}, not {limit}")
    return after, limit


def read_audit(store: AuditStore, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
    """The audit entries numbered above *after*, at most *limit* (1 to 1000), oldest first.

    Each is the record with its number under ``seq``. A coalesced row's
    ``count`` and ``last_time`` may grow after it was read (within its window).
    """
    after, limit = check_page(after, limit)
    return [{"seq": n, **rec} for n, rec in store.audit_read(after, limit)]


def record_audit(store: Backend, records: Sequence[Mapping[str, Any]]) -> None:
    """Append audit *records* in one durable write of *store*; version and state unchanged."""
    batch = [dict(r) for r in records]
    if batch:
        store.transact(lambda w: w.apply(Changeset(audit=batch)))


# -- governance decisions through a store ------------------------------------------

MAX_REVIEWER = 128
MAX_REASON = 512
EMBEDDED = "embedded"
"""The holder the embedded API (``Context.admit``, ``review``, ``quarantine`` …) audits as."""
WORKER = "runtime:governance-worker"
"""The holder, and the quarantine reviewer, of unattended passes (worker thread or actor task)."""
QUARANTINE_REVIEWER = "runtime:quarantine"
"""``reviewed_by`` of a frame quarantined by a scan or by request."""


def audit_template(
    method: str, *, holder: str | None, context: str | None = None, tenant: str | None = None
) -> dict[str, Any]:
    """The audit template of a governance call (``op`` ``admin``); its decisions fill the rest.

    The one shape every caller passes as ``audit=`` to :func:`run_admission`,
    :func:`run_review`, :func:`run_quarantine`, :func:`run_quarantine_scan` and
    :func:`run_pass`: the embedded API, the context actor, the CLI and the workers.
    """
    return {"method": method, "op": "admin", "holder": holder, "context": context, "tenant": tenant}


def check_review(decision: object, reviewer: object, reason: object = None) -> None:
    """Refuse a bad review request before anything is read: ``bad_decision``,
    ``bad_reviewer`` (1 to 128 printable characters) or ``bad_argument`` (reason)."""
    if decision not in ("accept", "reject"):
        raise RequestError(
            f"a review decides accept or reject, not {decision!r}", code="bad_decision"
        )
    if (
        not isinstance(reviewer, str)
        or not 1 <= len(reviewer) <= MAX_REVIEWER
        or not reviewer.isprintable()
        or not reviewer.strip()
    ):
        raise RequestError(
            f"a reviewer is 1 to {MAX_REVIEWER} printable characters, not {reviewer!r}",
            code="bad_reviewer",
        )
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise RequestError(
            f"a review reason is text of at most {MAX_REASON} characters", code="bad_argument"
        )


def check_scan(unused_ticks: object, failed_uses: object) -> None:
    """Refuse bad quarantine-scan options: ``unused_ticks`` None or >= 1, ``failed_uses`` 1-1000."""
    if unused_ticks is not None and (
        not isinstance(unused_ticks, int) or isinstance(unused_ticks, bool) or unused_ticks < 1
    ):
        raise OutOfRange(f"unused_ticks must be None or an integer >= 1, not {unused_ticks!r}")
    if not isinstance(failed_uses, int) or isinstance(failed_uses, bool):
        raise RequestError(
            f"failed_uses must be an integer, not {failed_uses!r}", code="bad_argument"
        )
    if not 1 <= failed_uses <= 1000:
        raise OutOfRange(f"failed_uses must be between 1 and 1000, not {failed_uses}")


def _decision_audit(
    audit: Mapping[str, Any] | None, ds: Sequence[Decision], version: int, when: float
) -> list[dict[str, Any]]:
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


def _decide_in(
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
    cs.audit.extend(_decision_audit(audit, ds, receipt.version, now))
    w.apply(cs)
    return receipt.version


def _admit_in(
    w: WriteView,
    policy: AdmissionPolicy,
    frame_id: str | None,
    now: float,
    audit: Mapping[str, Any] | None,
) -> tuple[list[Decision], int | None]:
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
    version = _decide_in(w, ds, now=now, reason=f"admission by policy:{policy.name}", audit=audit)
    return ds, version


def run_admission(
    store: Backend,
    *,
    policy: AdmissionPolicy | None = None,
    frame_id: str | None = None,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
) -> tuple[list[Decision], int | None]:
    """Admission (like ``Context.admit``) in one write, with its audit entry in the same write.

    Returns every decision (holds included) and the version the accepts and
    rejects committed at (None when nothing changed: no audit entry then).
    *audit* is the entry's template (``method``, ``op``, ``holder``, context …).
    Raises NotFound for an unknown *frame_id*, ``not_candidate`` for a frame that
    is not a candidate (or retired), ``bad_argument`` for a *frame_id* that is not
    a string; nothing changes then.
    """
    if frame_id is not None and not isinstance(frame_id, str):
        raise RequestError("a frame id is a string", code="bad_argument")
    pol: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
    when = time.time() if now is None else now
    return store.transact(lambda w: _admit_in(w, pol, frame_id, when, audit))


def run_review(
    store: Backend,
    frame_id: str,
    decision: str,
    reviewer: str,
    *,
    reason: str | None = None,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
) -> tuple[Decision, int]:
    """A human decision on a candidate or quarantined frame, audited in the same write.

    ``reviewed_by`` is ``human:<reviewer>``; *reason* joins the review reasons.
    Typed errors, nothing changed: ``bad_decision``, ``bad_reviewer``,
    ``bad_argument`` (:func:`check_review`), NotFound, ``not_reviewable``.
    """
    check_review(decision, reviewer, reason)
    if not isinstance(frame_id, str):
        raise RequestError("a frame id is a string", code="bad_argument")
    when = time.time() if now is None else now

    def run(w: WriteView) -> tuple[Decision, int]:
        f = w.frame(frame_id)
        if f is None:
            raise NotFound(f"no frame {frame_id!r}")
        if f.trust not in REVIEWABLE or f.lifecycle == RETIRED:
            raise RequestError(
                f"{frame_id} is {f.trust}; only candidates and quarantined frames are reviewed",
                code="not_reviewable",
            )
        why = (f"human review of a {f.trust} frame", *((reason,) if reason else ()))
        d = Decision(
            frame_id, "accept" if decision == "accept" else "reject", why, "human:" + reviewer
        )
        version = _decide_in(w, [d], now=when, reason=f"review by human:{reviewer}", audit=audit)
        assert version is not None
        return d, version

    return store.transact(run)


def all_traces(view: ReadView, page: int = 10_000) -> list[dict[str, Any]]:
    """Every model-call trace of *view*, oldest first, read in pages (one snapshot)."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        rows = view.traces(after, page)
        out.extend(t for _, t in rows)
        if len(rows) < page:
            return out
        after = rows[-1][0]


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a quarantine scan found and did: every finding, the frames it quarantined,
    the frames it spared (a human accepted them), and the version it committed at."""

    findings: tuple[Finding, ...]
    quarantined: tuple[str, ...]
    spared: tuple[str, ...]
    version: int | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "quarantined": list(self.quarantined),
            "spared": list(self.spared),
            "version": self.version,
        }


def _scan_in(
    w: WriteView,
    *,
    now: float,
    unused_ticks: int | None,
    failed_uses: int,
    reviewer: str,
    audit: Mapping[str, Any] | None,
) -> ScanResult:
    findings = find_low_quality(
        w,
        now_tick=w.meta().tick,
        unused_ticks=unused_ticks,
        usage=all_traces(w),
        failed_uses=failed_uses,
    )
    reasons, spared = _triage(w, findings)
    quarantined, version = _quarantine_in(w, reasons, now=now, reviewer=reviewer, audit=audit)
    return ScanResult(tuple(findings), tuple(quarantined), tuple(spared), version)


def _quarantine_in(
    w: WriteView,
    reasons: Mapping[str, Sequence[str]],
    *,
    now: float,
    reviewer: str,
    audit: Mapping[str, Any] | None,
) -> tuple[list[str], int | None]:
    """Quarantine the accepted, unretired frames of *reasons* (the others are skipped)."""
    ds = []
    for fid, why in reasons.items():
        f = w.frame(fid)
        if f is not None and f.trust == ACCEPTED and f.lifecycle != RETIRED:
            ds.append(Decision(fid, "quarantine", tuple(why), reviewer))
    version = _decide_in(w, ds, now=now, reason="quarantine of low-quality memories", audit=audit)
    return [d.frame_id for d in ds], version


def run_quarantine(
    store: Backend,
    findings: Iterable[Finding | str],
    *,
    reviewer: str = QUARANTINE_REVIEWER,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
) -> tuple[list[str], int | None]:
    """Quarantine the frames named by *findings* (a :class:`Finding` or a frame id), audited.

    Unlike a scan this is a request: a frame a human accepted is quarantined
    too (how a human decision is reopened). Frames that are not accepted, or
    are retired, or unknown, are skipped. One governance transaction and its
    audit entry in one write; returns the ids quarantined and the version (None,
    and no audit entry, when nothing changed). An item that is neither a
    Finding nor a string is ``bad_argument``, before anything is read.
    """
    reasons: dict[str, list[str]] = {}
    for item in findings:
        if isinstance(item, Finding):
            reasons.setdefault(item.frame_id, []).append(f"{item.rule}: {item.detail}")
        elif isinstance(item, str):
            reasons.setdefault(item, []).append("quarantined by request")
        else:
            raise RequestError(
                f"quarantine takes findings or frame ids, not {type(item).__name__}",
                code="bad_argument",
            )
    when = time.time() if now is None else now
    return store.transact(
        lambda w: _quarantine_in(w, reasons, now=when, reviewer=reviewer, audit=audit)
    )


def _human_accepted(view: ReadView, frame_id: str) -> bool:
    f = view.frame(frame_id)
    return f is not None and str(f.envelope.get("reviewed_by") or "").startswith("human:")


def run_quarantine_scan(
    store: Backend,
    *,
    unused_ticks: int | None = None,
    failed_uses: int = 3,
    reviewer: str = QUARANTINE_REVIEWER,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
) -> ScanResult:
    """:func:`find_low_quality` over every trace, then quarantine, in one audited write.

    Frames a human accepted (``reviewed_by`` ``human:…``) are reported but
    spared: only a human undoes a human decision (``Context.quarantine([id])``
    then a review). Nothing is written, nor audited, when nothing is quarantined.
    """
    check_scan(unused_ticks, failed_uses)
    when = time.time() if now is None else now
    return store.transact(
        lambda w: _scan_in(
            w,
            now=when,
            unused_ticks=unused_ticks,
            failed_uses=failed_uses,
            reviewer=reviewer,
            audit=audit,
        )
    )


# -- the unattended pass: decided on a read, written only when it changes something --


@dataclass(frozen=True, slots=True)
class PassCursor:
    """Where an unattended pass left off, so that the next one looks only at what changed.

    ``version``: the changes of every version up to it were taken into account;
    ``trace``: the last model-call trace read; ``held``: frames to look at
    again (the candidates admission held, and decisions left for the next pass
    because their frame changed between the read and the write); ``swept``: the
    tick of the last scan over every frame (the ``unused`` rule); ``options``:
    the policy name, ``unused_ticks`` and ``failed_uses`` it was made with (a
    pass with other options starts over with a full pass).
    """

    version: int
    trace: int
    held: frozenset[str]
    swept: int
    options: tuple[str, int | None, int]


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What one pass decided on a read view (:func:`plan_pass`); :func:`apply_pass` writes it.

    ``decisions`` are admission's, holds included, oldest candidate first;
    ``quarantine`` pairs a frame with the reasons of its findings; ``seen`` is
    the ``updated_version`` each decided frame had when it was read (the write
    re-checks it); ``version``, ``tick`` and ``trace`` are what was read.
    """

    version: int
    tick: int
    trace: int
    swept: int
    options: tuple[str, int | None, int]
    full: bool
    decisions: tuple[Decision, ...]
    quarantine: tuple[tuple[str, tuple[str, ...]], ...]
    spared: tuple[str, ...]
    seen: Mapping[str, int]

    @property
    def writes(self) -> bool:
        """Whether applying the plan may change something (an accept, a reject, a quarantine)."""
        return bool(self.quarantine) or any(d.verdict != "hold" for d in self.decisions)


class _Cached:
    """A read view that decodes each frame it is asked for once (records are shared, read-only)."""

    def __init__(self, view: ReadView) -> None:
        self._view = view
        self._frames: dict[str, Frame | None] = {}

    def frame(self, frame_id: str) -> Frame | None:
        try:
            return self._frames[frame_id]
        except KeyError:
            f = self._frames[frame_id] = self._view.frame(frame_id)
            return f

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


class _Decided:
    """A read view in which some frames read as a pending governance decision left them."""

    def __init__(self, view: ReadView, frames: Mapping[str, Frame]) -> None:
        self._view = view
        self._frames = frames

    def frame(self, frame_id: str) -> Frame | None:
        f = self._frames.get(frame_id)
        return f if f is not None else self._view.frame(frame_id)

    def iter_frames(self) -> Iterator[Frame]:
        for f in self._view.iter_frames():
            yield self._frames.get(f.id, f)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


def _traces_after(
    view: ReadView, after: int, page: int = 10_000
) -> list[tuple[int, dict[str, Any]]]:
    """The traces numbered above *after*, with their numbers, oldest first (one snapshot)."""
    out: list[tuple[int, dict[str, Any]]] = []
    while True:
        rows = view.traces(after, page)
        out.extend(rows)
        if len(rows) < page:
            return out
        after = rows[-1][0]


def _contradicted_by(view: ReadView, frame_ids: Iterable[str]) -> set[str]:
    """The frames that frames of *frame_ids* contradict or supersede."""
    out: set[str] = set()
    for fid in frame_ids:
        out.update(o for label, o in view.relations_from(fid) if label in (CONTRADICTS, SUPERSEDES))
    return out


def _changed_since(view: ReadView, after: int, upto: int) -> set[str] | None:
    """Ids the log names as changed in versions ``(after, upto]``: frames written, and both
    ends of every relation added or removed. None when the log lacks one of those versions."""
    out: set[str] = set()
    for version in range(after + 1, upto + 1):
        record = view.txlog(version)
        if record is None:
            return None
        for item in record.get("changes") or ():
            # A frame id, an ``@eN`` ref, or an edge as ``subject label object``
            # (ids and labels hold no spaces).
            if not isinstance(item, str) or item.startswith("@"):
                continue
            parts = item.split(" ")
            if len(parts) == 3:
                out.update(p for p in (parts[0], parts[2]) if not p.startswith("@"))
            elif len(parts) == 1:
                out.add(item)
        for write in record.get("writes") or ():
            fid = write.get("frame") if isinstance(write, Mapping) else None
            if isinstance(fid, str):
                out.add(fid)
    return out


def _triage(view: ReadView, findings: Iterable[Finding]) -> tuple[dict[str, list[str]], list[str]]:
    """The reasons to quarantine each finding's frame, and the frames spared (human-accepted)."""
    reasons: dict[str, list[str]] = {}
    spared: list[str] = []
    for item in findings:
        if item.frame_id in spared:
            continue
        if item.frame_id not in reasons and _human_accepted(view, item.frame_id):
            # A human's accept stands: a scan never undoes a human decision by itself.
            spared.append(item.frame_id)
            continue
        reasons.setdefault(item.frame_id, []).append(f"{item.rule}: {item.detail}")
    return reasons, spared


def _settled(uses: Sequence[str], failed_uses: int) -> bool:
    """Whether these latest uses of a procedure settle the ``failing_procedure`` rule alone."""
    return len(uses) >= failed_uses or "ok" in uses


def plan_pass(
    view: ReadView,
    *,
    policy: AdmissionPolicy | None = None,
    unused_ticks: int | None = None,
    failed_uses: int = 3,
    cursor: PassCursor | None = None,
) -> PassPlan:
    """Decide one unattended pass on *view*, writing nothing: admission, then the quarantine scan.

    The scan judges the state admission's decisions leave. Without *cursor*
    (or with one made with other options, or when the log no longer holds a
    version since it) this is the full pass: every candidate, every frame,
    every trace. With it, only what may have changed since: frames the log
    names as changed in versions after ``cursor.version`` (and both ends of the
    relations changed), the frames the cursor holds, the frames that changed
    frames (and frames admitted now) contradict or supersede, and the frames
    cited in traces after ``cursor.trace``; every trace is read only when a
    procedure's latest uses do not settle the ``failing_procedure`` rule. The
    ``unused`` rule needs every frame: with *unused_ticks*, a scan of every
    frame and trace runs when ``max(1, unused_ticks // 4)`` ticks have passed
    since the last one. The decisions equal a full pass's on the same state,
    but for the ``unused`` rule, which may find a frame up to that many ticks late.
    """
    check_scan(unused_ticks, failed_uses)
    pol: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
    options = (pol.name, unused_ticks, failed_uses)
    meta = view.meta()
    changed: set[str] | None = None
    if cursor is not None and cursor.options == options and cursor.version <= meta.version:
        changed = _changed_since(view, cursor.version, meta.version)
    # One snapshot: each frame is decoded once, for the policy, the scan and the decisions.
    view = cast(ReadView, _Cached(view))
    frame = view.frame
    if cursor is None or changed is None:  # the full pass
        ds = admission_decisions(view, pol)
        rows = _traces_after(view, 0)
        trace = rows[-1][0] if rows else 0
    else:
        rows = _traces_after(view, cursor.trace)
        trace = rows[-1][0] if rows else cursor.trace
        for _, t in rows:
            changed.update(fid for fid in t.get("cited") or () if isinstance(fid, str))
        changed |= cursor.held
        changed |= _contradicted_by(view, list(changed))
        # Every candidate is here: the cursor holds those left undecided, the log names new ones.
        waiting = [
            f
            for f in map(frame, changed)
            if f is not None and f.trust == CANDIDATE and f.lifecycle != RETIRED
        ]
        reviewer = "policy:" + pol.name
        ds = [pol.review(f, view) for f in sorted(waiting, key=_age)]
        ds = [d if d.reviewer else replace(d, reviewer=reviewer) for d in ds]
    decided = [d for d in ds if d.verdict != "hold"]
    seen: dict[str, int] = {}
    for d in decided:
        f = frame(d.frame_id)
        if f is not None:
            seen[d.frame_id] = f.updated_version
    _, cs = decide(view, decided, now=0.0, reason="")
    now_frames = {f.id: f for f in cs.frames} if cs is not None else {}
    after = cast(ReadView, _Decided(view, now_frames)) if now_frames else view
    tick = meta.tick
    swept = cursor.swept if cursor is not None and changed is not None else tick
    if changed is None or (unused_ticks is not None and tick - swept >= max(1, unused_ticks // 4)):
        if changed is not None:  # a sweep: every trace, not only the new ones
            rows = _traces_after(view, 0)
        swept = tick
        findings = find_low_quality(
            after,
            now_tick=tick,
            unused_ticks=unused_ticks,
            usage=(t for _, t in rows),
            failed_uses=failed_uses,
        )
    else:
        # Frames admitted now were candidates, so they and what they contradict are in changed.
        scanned = [
            f
            for f in (now_frames.get(fid) or frame(fid) for fid in changed)
            if f is not None and _scanned(f)
        ]
        scanned.sort(key=_age)
        _, outcomes = _usage(t for _, t in rows)
        if any(
            f.kind == "procedural" and not _settled(outcomes.get(f.id, []), failed_uses)
            for f in scanned
        ):  # the new traces do not settle a procedure: read its earlier uses too
            _, outcomes = _usage(t for _, t in _traces_after(view, 0))
        findings = [
            item
            for f in scanned
            for item in _findings(
                after,
                f,
                now_tick=tick,
                unused_ticks=None,
                last_seen={},
                outcomes=outcomes,
                failed_uses=failed_uses,
            )
        ]
    reasons, spared = _triage(after, findings)
    for fid in reasons:
        if fid not in seen:
            f = frame(fid)
            if f is not None:
                seen[fid] = f.updated_version
    return PassPlan(
        version=meta.version,
        tick=tick,
        trace=trace,
        swept=swept,
        options=options,
        full=changed is None,
        decisions=tuple(ds),
        quarantine=tuple((fid, tuple(why)) for fid, why in reasons.items()),
        spared=tuple(spared),
        seen=seen,
    )


def _apply_in(
    w: WriteView, plan: PassPlan, *, now: float, audit: Mapping[str, Any] | None
) -> dict[str, Any]:
    unmoved = w.meta().version == plan.version
    later: set[str] = set()
    admit: list[Decision] = []
    for d in plan.decisions:
        if d.verdict == "hold":
            continue
        f = w.frame(d.frame_id)
        if (
            f is not None
            and f.trust == CANDIDATE
            and f.lifecycle != RETIRED
            and f.updated_version == plan.seen.get(d.frame_id)
        ):
            admit.append(d)
        else:  # decided on a state that has changed since: the next pass decides again
            later.add(d.frame_id)
    name = plan.options[0]
    admitted = _decide_in(w, admit, now=now, reason=f"admission by policy:{name}", audit=audit)
    written = {d.frame_id for d in admit}
    reasons: dict[str, Sequence[str]] = {}
    for fid, why in plan.quarantine:
        f = w.frame(fid)
        if (
            not later  # the scan judged the state admission was to leave
            and f is not None
            and f.trust == ACCEPTED
            and f.lifecycle != RETIRED
            and (fid in written or f.updated_version == plan.seen.get(fid))
        ):
            reasons[fid] = why
        else:
            later.add(fid)
    quarantined, scanned = _quarantine_in(w, reasons, now=now, reviewer=WORKER, audit=audit)
    versions = [v for v in (admitted, scanned) if v is not None]
    # Nothing else was written since the read: what this write changed was judged already.
    version = w.meta().version if unmoved else plan.version
    return _pass_report(plan, admit, quarantined, versions, later, version)


def _pass_report(
    plan: PassPlan,
    applied: Sequence[Decision],
    quarantined: Sequence[str],
    versions: Sequence[int],
    later: set[str],
    version: int,
) -> dict[str, Any]:
    held = [d.frame_id for d in plan.decisions if d.verdict == "hold"]
    cursor = PassCursor(
        version=version,
        trace=plan.trace,
        held=frozenset(held) | later,
        swept=plan.swept,
        options=plan.options,
    )
    return {
        "decisions": [d.to_dict() for d in applied],
        "held": held,
        "quarantined": list(quarantined),
        "spared": list(plan.spared),
        "versions": list(versions),
        "deferred": sorted(later),
        "full": plan.full,
        "cursor": cursor,
    }


def apply_pass(
    store: Backend,
    plan: PassPlan,
    *,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write what *plan* decided, each decision re-checked against the current frame.

    A write transaction is opened only when the plan accepts, rejects or
    quarantines something. Inside it, a decision applies only if its frame is
    still what was read (still a candidate, or still accepted, with the same
    ``updated_version``); the others are left for the next pass (``deferred``,
    and held by the cursor), and so are the quarantines when an admission
    decision was left (the scan judged the state admission was to leave).
    Accepts and rejects are one governance transaction, quarantines a second,
    each audited when it changed something. Answers ``{"decisions" (applied),
    "held", "quarantined", "spared", "versions", "deferred", "full",
    "cursor"}``; ``cursor`` is the :class:`PassCursor` for the next pass.
    """
    when = time.time() if now is None else now
    if not plan.writes:
        return _pass_report(plan, [], [], [], set(), plan.version)

    def run(inner: WriteView) -> dict[str, Any]:
        w = BatchView(inner)  # the re-checks and the decisions read each frame once
        report = _apply_in(cast(WriteView, w), plan, now=when, audit=audit)
        w.flush()
        return report

    return store.transact(run)


def run_pass(
    store: Backend,
    *,
    policy: AdmissionPolicy | None = None,
    unused_ticks: int | None = None,
    failed_uses: int = 3,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
    cursor: PassCursor | None = None,
) -> dict[str, Any]:
    """One unattended governance pass: :func:`plan_pass` on a read, then :func:`apply_pass`.

    Admission's accepts and rejects (one governance transaction), then the
    quarantine of what the scan finds in the state they leave, sparing frames a
    human accepted (a second transaction), both in one write that is opened
    only when there is something to write; each is audited when it changed
    something. Without *cursor* the pass looks at everything; pass the
    report's ``cursor`` to the next call to look only at what changed since.
    Answers ``{"decisions", "held", "quarantined", "spared", "versions",
    "deferred", "full", "cursor"}`` (see :func:`apply_pass`).
    """
    check_scan(unused_ticks, failed_uses)
    pol: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
    plan = store.read(
        lambda v: plan_pass(
            v, policy=pol, unused_ticks=unused_ticks, failed_uses=failed_uses, cursor=cursor
        )
    )
    return apply_pass(store, plan, now=now, audit=audit)


# -- the embedded background worker ------------------------------------------------

MIN_EVERY = 0.01
MAX_EVERY = 86_400.0


def check_every(every: object) -> float:
    """Seconds between governance passes: a number from 0.01 to 86400."""
    if not isinstance(every, (int, float)) or isinstance(every, bool):
        raise RequestError(f"every must be seconds, not {every!r}", code="bad_argument")
    if not MIN_EVERY <= float(every) <= MAX_EVERY:
        raise OutOfRange(f"every must be between {MIN_EVERY} and {MAX_EVERY} s, not {every}")
    return float(every)


class GovernanceWorker:
    """Runs :func:`run_pass` every *every* seconds on a daemon thread, unattended (R43).

    For a :class:`~service.context.Context` used without Ray (pass the context or
    its backend). The first pass looks at everything; each later one carries
    the previous pass's :class:`PassCursor` and looks only at what changed
    since. A pass decides on a read snapshot and opens a write only when it
    has something to write; inside it, each decision is re-checked against
    the current frame (both stores serialize write transactions), so it is
    safe beside the application's own calls: a decision made on a frame that
    changed meanwhile is left for the next pass. A failing pass is logged,
    counted in :attr:`errors`, audited (outcome ``error``) when the store still
    writes, and the next pass runs as usual from the last good cursor. Call
    :meth:`stop` before closing the context; a pass in progress finishes
    first. ``with GovernanceWorker(ctx, every=60):`` starts and stops it.
    """

    def __init__(
        self,
        context: Any,
        *,
        every: float,
        policy: AdmissionPolicy | None = None,
        unused_ticks: int | None = None,
        failed_uses: int = 3,
        holder: str = WORKER,
    ) -> None:
        self.every = check_every(every)
        check_scan(unused_ticks, failed_uses)
        store = getattr(context, "backend", context)
        if getattr(store, "readonly", False):
            raise RequestError("a governance worker needs a writable store", code="read_only")
        self._store: Backend = store
        self._name = getattr(context, "name", None)
        self._tenant = store.read(lambda v: v.meta().tenant)
        self.policy: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
        self.unused_ticks = unused_ticks
        self.failed_uses = failed_uses
        self.holder = holder
        self.passes = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_report: dict[str, Any] | None = None
        self.cursor: PassCursor | None = None
        """Where the last successful pass left off (None: the next pass is a full one)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _audit(self) -> dict[str, Any]:
        return audit_template(
            "governance_pass", holder=self.holder, context=self._name, tenant=self._tenant
        )

    def run_once(self) -> dict[str, Any]:
        """One pass now, on the calling thread, from :attr:`cursor` (see :func:`run_pass`)."""
        report = run_pass(
            self._store,
            policy=self.policy,
            unused_ticks=self.unused_ticks,
            failed_uses=self.failed_uses,
            audit=self._audit(),
            cursor=self.cursor,
        )
        self.cursor = report["cursor"]
        self.passes += 1
        self.last_report = report
        return report

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.run_once()
            except Exception as e:  # one failing pass must not end the worker
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("governance pass failed")
                try:
                    entry = audit_entry(
                        "governance_pass",
                        "admin",
                        holder=self.holder,
                        allowed=False,
                        outcome="error",
                        why=self.last_error,
                        context=self._name,
                        tenant=self._tenant,
                    )
                    record_audit(self._store, [entry])
                except Exception:
                    log.exception("cannot audit the failed governance pass")

    def start(self) -> GovernanceWorker:
        """Start the thread (once); returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="morphz-governance", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the pass in progress, if any; waits up to *timeout* seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> GovernanceWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
