"""Admission (R42): the policy that reviews a candidate, its decisions, and what awaits a human.

An :class:`AdmissionPolicy` reviews one candidate frame against a
:class:`~protocol.view.ReadView` and returns a :class:`Decision` whose
:data:`Ruling` is ``accept``, ``reject`` or ``hold``. :class:`DefaultPolicy`
checks source, scope, sensitive content (:func:`sensitive_findings`),
conflicts and risk. :func:`pending` lists what governance has not settled,
computed read-only. Pure: nothing here reads a clock or writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from protocol.governance.sensitive import sensitive_findings
from protocol.ids import SUPERSEDES
from protocol.sexpr import print_form
from protocol.state import ACCEPTED, CANDIDATE, QUARANTINED, REJECTED, RETIRED, Frame
from protocol.view import ReadView

Ruling = Literal["accept", "reject", "hold", "quarantine"]
"""What a governance decision rules on a frame: admission rules the first three;
``quarantine`` is the runtime's (R43)."""
REVIEWABLE = frozenset({CANDIDATE, QUARANTINED})
"""Trust statuses a review (policy or human) may decide."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The ruling on one frame (its ``verdict``) and why; ``reviewer`` is who decided."""

    frame_id: str
    verdict: Ruling
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


def body_text(f: Frame) -> str:
    """A frame body as text, for content checks."""
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
