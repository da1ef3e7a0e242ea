"""Quarantine (R43): findings of low-quality memories, and their quarantine inside a write.

* :func:`find_low_quality` is the unattended check: frames contradicted by
  later evidence, procedures whose last uses failed, frames nobody used, and
  accepted frames that hold sensitive content (secrets, personal data:
  :mod:`~protocol.governance.sensitive`); :func:`scan_frames` also returns
  those located and masked, :func:`scan_observations` finds them in
  observations (which cannot be quarantined: they are reported).
* :func:`scan_in` runs it over every trace inside a
  :class:`~protocol.view.WriteView` and quarantines what it finds, sparing the
  frames a human accepted; :func:`quarantine_in` quarantines by request
  (:func:`request_reasons`). Time is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from protocol.errors import RequestError
from protocol.governance.audit import audit_entry
from protocol.governance.decisions import decide_in
from protocol.governance.policy import Decision, body_text
from protocol.governance.sensitive import (
    MASK,
    MAX_SCAN_CHARS,
    Action,
    SensitiveFinding,
    locate_in,
)
from protocol.ids import SUPERSEDES, event_ref
from protocol.state import ACCEPTED, ACTIVE, RETIRED, Frame
from protocol.view import Changeset, ReadView, WriteView

CONTRADICTS = "contradicts"
"""The relation label that marks later evidence against a frame (R43)."""
QUARANTINE_REVIEWER = "runtime:quarantine"
"""``reviewed_by`` of a frame quarantined by a scan or by request."""


@dataclass(frozen=True, slots=True)
class Finding:
    """A low-quality memory: which frame, which rule (``contradicted``,
    ``failing_procedure``, ``unused``, ``sensitive_content``) and why."""

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
    """Accepted frames that look wrong or dead, or hold sensitive content (R43).

    On accepted, active, unprotected frames:

    * ``contradicted``: a later accepted frame, not retired, relates to it with
      ``contradicts`` or ``supersedes`` while it is still active;
    * ``failing_procedure``: a ``procedural`` frame whose last *failed_uses*
      uses (traces citing it under ``cited`` with an ``outcome``) all failed;
    * ``unused`` (only with *unused_ticks*): no traced call had it in
      ``frames_present`` during the last *unused_ticks* ticks, and it is at least
      that old.

    On every accepted, unretired frame (protected or retiring ones too):

    * ``sensitive_content``: its body or keys match a rule of
      :mod:`~protocol.governance.sensitive` (one finding per rule and field).

    *usage* is the traces, oldest first (``Context.traces()``). Pure; the caller
    decides whether to quarantine what it finds.
    """
    findings, _ = scan_frames(
        view, now_tick=now_tick, unused_ticks=unused_ticks, usage=usage, failed_uses=failed_uses
    )
    return findings


def scan_frames(
    view: ReadView,
    *,
    now_tick: int,
    unused_ticks: int | None = None,
    usage: Iterable[Mapping[str, Any]] = (),
    failed_uses: int = 3,
) -> tuple[list[Finding], list[SensitiveFinding]]:
    """:func:`find_low_quality`, and the sensitive content it found, located and masked."""
    last_seen, outcomes = usage_of(usage)
    out: list[Finding] = []
    located: list[SensitiveFinding] = []
    for f in sorted(view.iter_frames(), key=frame_age):
        if is_checked(f):
            found, where = frame_checks(
                view,
                f,
                now_tick=now_tick,
                unused_ticks=unused_ticks,
                last_seen=last_seen,
                outcomes=outcomes,
                failed_uses=failed_uses,
            )
            out.extend(found)
            located.extend(where)
    return out, located


def is_checked(f: Frame) -> bool:
    """Whether any quarantine rule looks at *f*: accepted and not retired."""
    return f.trust == ACCEPTED and f.lifecycle != RETIRED


def frame_checks(
    view: ReadView,
    f: Frame,
    *,
    now_tick: int,
    unused_ticks: int | None,
    last_seen: Mapping[str, int],
    outcomes: Mapping[str, Sequence[str]],
    failed_uses: int,
) -> tuple[list[Finding], list[SensitiveFinding]]:
    """Every finding on one frame :func:`is_checked` admits, in the order a full scan makes
    them (the quality rules, then sensitive content), and the sensitive content located."""
    out: list[Finding] = []
    if is_scanned(f):
        out = frame_findings(
            view,
            f,
            now_tick=now_tick,
            unused_ticks=unused_ticks,
            last_seen=last_seen,
            outcomes=outcomes,
            failed_uses=failed_uses,
        )
    located = sensitive_in_frame(f) if is_checked(f) else []
    return out + content_findings(located), located


def sensitive_in_frame(f: Frame) -> list[SensitiveFinding]:
    """Sensitive content in a frame's printed body and in its retrieval keys, located."""
    found = locate_in("frame", f.id, f.id, "body", body_text(f))
    keys = f.envelope.get("keys") or ()
    if keys:
        found += locate_in("frame", f.id, f.id, "keys", " ".join(str(k) for k in keys))
    return found


def content_findings(located: Iterable[SensitiveFinding]) -> list[Finding]:
    """One ``sensitive_content`` finding per frame, field and rule (the first match's offsets,
    and how many more); the details never hold the secret."""
    groups: dict[tuple[str, str, str], list[SensitiveFinding]] = {}
    for s in located:
        groups.setdefault((s.ref, s.field, s.rule), []).append(s)
    out: list[Finding] = []
    for (ref, field, _), items in groups.items():
        first = items[0]
        more = f" and {len(items) - 1} more" if len(items) > 1 else ""
        detail = f"{first.name} in {field} at {first.start}-{first.end}{more}"
        out.append(Finding(ref, "sensitive_content", detail))
    return out


def scan_observations(
    view: ReadView,
    after: int = 0,
    *,
    budget: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[list[SensitiveFinding], int]:
    """Sensitive content in the text of every observation numbered above *after*, located and
    masked; and the last sequence number looked at (the ``after`` of the next call).

    *budget* bounds the characters scanned in one call and *stop* (a caller's time
    budget; protocol reads no clock) is asked between observations: when either says
    enough, the call ends there and the next one resumes after the last observation
    looked at. At least one observation is looked at per call, so a scan always moves on.
    Each text costs at most :data:`~protocol.governance.sensitive.MAX_SCAN_CHARS`.
    """
    upto = view.meta().next_seq - 1
    out: list[SensitiveFinding] = []
    spent = 0
    last = after
    for seq in range(after + 1, upto + 1):
        if last > after and (
            (budget is not None and spent >= budget) or (stop is not None and stop())
        ):
            break
        last = seq
        e = view.event(seq)
        if e is None:
            continue
        text = view.event_content(seq)
        if text:
            spent += min(len(text), MAX_SCAN_CHARS)
            out.extend(locate_in("observation", e.id, event_ref(seq), "text", text))
    return out, max(after, last)


def with_actions(
    located: Iterable[SensitiveFinding],
    quarantined: Iterable[str],
    spared: Iterable[str],
    deferred: Iterable[str] = (),
) -> list[SensitiveFinding]:
    """*located* with what the scan did: frames quarantined, spared or deferred; the
    observations (and frames the scan left alone) reported."""
    done: dict[str, Action] = {}
    for ids, action in ((quarantined, "quarantined"), (spared, "spared"), (deferred, "deferred")):
        done.update(dict.fromkeys(ids, cast(Action, action)))
    return [
        s.with_action(done.get(s.ref, "reported") if s.record == "frame" else "reported")
        for s in located
    ]


MAX_AUDITED_FINDINGS = 100
"""Located findings one audit entry lists (the first ones); ``sensitive_total`` counts all."""


def sensitive_audit(
    audit: Mapping[str, Any] | None, located: Sequence[SensitiveFinding], when: float
) -> list[dict[str, Any]]:
    """The audit entry of sensitive content found (outcome ``flagged``), masked: none without
    a template or without findings."""
    if audit is None or not located:
        return []
    frames = sorted({s.ref for s in located if s.record == "frame"})
    events = sorted({s.ref for s in located if s.record == "observation"})
    why = "sensitive content in " + ", ".join(
        part
        for part in (
            f"{len(frames)} frame(s): {' '.join(frames)}" if frames else "",
            f"{len(events)} observation(s): {' '.join(events)}" if events else "",
        )
        if part
    )
    return [
        {
            **audit,
            **audit_entry(
                str(audit.get("method", "governance")),
                str(audit.get("op", "admin")),
                holder=audit.get("holder"),
                allowed=True,
                outcome="flagged",
                why=why,
                at=when,
            ),
            # The audit log outlives erasure (forget rewrites the record, not the log), so its
            # excerpts hold no text of the record at all: just what was masked, and how long.
            "sensitive": [
                {**s.to_dict(), "excerpt": f"{MASK} ({s.end - s.start} characters)"}
                for s in located[:MAX_AUDITED_FINDINGS]
            ],
            "sensitive_total": len(located),
        }
    ]


def frame_age(f: Frame) -> tuple[int, str]:
    """The sort key that orders frames oldest first (creation version, then id)."""
    return (f.created_version, f.id)


def is_scanned(f: Frame) -> bool:
    """Whether the quarantine rules look at *f*: accepted, active, unprotected."""
    return f.trust == ACCEPTED and f.lifecycle == ACTIVE and not f.protected


def usage_of(
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


def frame_findings(
    view: ReadView,
    f: Frame,
    *,
    now_tick: int,
    unused_ticks: int | None,
    last_seen: Mapping[str, int],
    outcomes: Mapping[str, Sequence[str]],
    failed_uses: int,
) -> list[Finding]:
    """The findings of :func:`find_low_quality` on one frame that :func:`is_scanned` admits."""
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
    the frames it spared (a human accepted them), the version it committed at, and the
    sensitive content it found in frames and observations, located and masked."""

    findings: tuple[Finding, ...]
    quarantined: tuple[str, ...]
    spared: tuple[str, ...]
    version: int | None
    sensitive: tuple[SensitiveFinding, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "quarantined": list(self.quarantined),
            "spared": list(self.spared),
            "version": self.version,
            "sensitive": [s.to_dict() for s in self.sensitive],
        }


def scan_in(
    w: WriteView,
    *,
    now: float,
    unused_ticks: int | None,
    failed_uses: int,
    reviewer: str,
    audit: Mapping[str, Any] | None,
    observations: Sequence[SensitiveFinding] = (),
) -> ScanResult:
    """:func:`find_low_quality` over every trace of *w*, then the quarantine of what it
    finds (as *reviewer*), with its audit entry; frames a human accepted are spared.

    *observations* is the sensitive content found in observations (by
    :func:`scan_observations`, on a read): reported with the frames' and, with
    them, audited in the same write (outcome ``flagged``).
    """
    findings, located = scan_frames(
        w,
        now_tick=w.meta().tick,
        unused_ticks=unused_ticks,
        usage=all_traces(w),
        failed_uses=failed_uses,
    )
    reasons, spared = triage(w, findings)
    quarantined, version = quarantine_in(w, reasons, now=now, reviewer=reviewer, audit=audit)
    sensitive = with_actions([*located, *observations], quarantined, spared)
    record_sensitive(w, sensitive, now=now, audit=audit)
    return ScanResult(tuple(findings), tuple(quarantined), tuple(spared), version, tuple(sensitive))


def record_sensitive(
    w: WriteView,
    located: Sequence[SensitiveFinding],
    *,
    now: float,
    audit: Mapping[str, Any] | None,
) -> None:
    """Append the audit entry of *located* inside *w* (version and state unchanged)."""
    entries = sensitive_audit(audit, located, now)
    if entries:
        w.apply(Changeset(audit=entries))


def quarantine_in(
    w: WriteView,
    reasons: Mapping[str, Sequence[str]],
    *,
    now: float,
    reviewer: str,
    audit: Mapping[str, Any] | None,
) -> tuple[list[str], int | None]:
    """Quarantine the accepted, unretired frames of *reasons* inside *w* (the others are
    skipped), with the audit entry; the ids quarantined and the version (None when none)."""
    ds = []
    for fid, why in reasons.items():
        f = w.frame(fid)
        if f is not None and f.trust == ACCEPTED and f.lifecycle != RETIRED:
            ds.append(Decision(fid, "quarantine", tuple(why), reviewer))
    version = decide_in(w, ds, now=now, reason="quarantine of low-quality memories", audit=audit)
    return [d.frame_id for d in ds], version


def request_reasons(findings: Iterable[Finding | str]) -> dict[str, list[str]]:
    """The reasons to quarantine each frame named by *findings* (a :class:`Finding` or a
    frame id); ``bad_argument`` for an item that is neither."""
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
    return reasons


def human_accepted(view: ReadView, frame_id: str) -> bool:
    """Whether a human accepted *frame_id* (``reviewed_by`` ``human:…``)."""
    f = view.frame(frame_id)
    return f is not None and str(f.envelope.get("reviewed_by") or "").startswith("human:")


def triage(view: ReadView, findings: Iterable[Finding]) -> tuple[dict[str, list[str]], list[str]]:
    """The reasons to quarantine each finding's frame, and the frames spared (human-accepted)."""
    reasons: dict[str, list[str]] = {}
    spared: list[str] = []
    for item in findings:
        if item.frame_id in spared:
            continue
        if item.frame_id not in reasons and human_accepted(view, item.frame_id):
            # A human's accept stands: a scan never undoes a human decision by itself.
            spared.append(item.frame_id)
            continue
        reasons.setdefault(item.frame_id, []).append(f"{item.rule}: {item.detail}")
    return reasons, spared
