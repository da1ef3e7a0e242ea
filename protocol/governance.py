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

See ``docs/governance.md`` for the decisions behind these rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

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
from protocol.view import Changeset, ReadView

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
    traces = list(usage)
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
    out: list[Finding] = []
    for f in sorted(view.iter_frames(), key=lambda f: (f.created_version, f.id)):
        if f.trust != ACCEPTED or f.lifecycle != ACTIVE or f.protected:
            continue
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
        uses = outcomes.get(f.id, [])
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
