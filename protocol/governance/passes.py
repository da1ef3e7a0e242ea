"""The unattended pass: decided on a read, written only when it decides something.

:func:`plan_pass` decides one pass on a :class:`~protocol.view.ReadView`
(admission, then the quarantine scan of the state admission leaves) and
returns a :class:`PassPlan`; :func:`apply_plan` writes it inside a
:class:`~protocol.view.WriteView`, each decision re-checked against the
current frame. From a :class:`PassCursor` a pass looks only at what changed
since the last one, and at the observations recorded since the last one (a
full pass reads every observation). Time is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from protocol.governance.audit import WORKER
from protocol.governance.checks import check_scan
from protocol.governance.decisions import decide, decide_in
from protocol.governance.policy import AdmissionPolicy, Decision, DefaultPolicy, admission_decisions
from protocol.governance.quarantine import (
    CONTRADICTS,
    frame_age,
    frame_checks,
    is_checked,
    quarantine_in,
    record_sensitive,
    scan_frames,
    scan_observations,
    triage,
    usage_of,
    with_actions,
)
from protocol.governance.sensitive import SensitiveFinding
from protocol.ids import SUPERSEDES
from protocol.state import ACCEPTED, CANDIDATE, RETIRED, Frame
from protocol.view import BatchView, ReadView, WriteView

MAX_SCAN_PER_PASS = 16 << 20
"""Characters of observation text one unattended pass scans at most (the next pass goes on)."""


@dataclass(frozen=True, slots=True)
class PassCursor:
    """Where an unattended pass left off, so that the next one looks only at what changed.

    ``version``: the changes of every version up to it were taken into account;
    ``trace``: the last model-call trace read; ``held``: frames to look at
    again (the candidates admission held, and decisions left for the next pass
    because their frame changed between the read and the write); ``swept``: the
    tick of the last scan over every frame (the ``unused`` rule); ``options``:
    the policy name, ``unused_ticks`` and ``failed_uses`` it was made with (a
    pass with other options starts over with a full pass); ``events``: the last
    observation checked for sensitive content (a full pass reads them all).
    """

    version: int
    trace: int
    held: frozenset[str]
    swept: int
    options: tuple[str, int | None, int]
    events: int = 0


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What one pass decided on a read view (:func:`plan_pass`); :func:`apply_plan` writes it.

    ``decisions`` are admission's, holds included, oldest candidate first;
    ``quarantine`` pairs a frame with the reasons of its findings; ``seen`` is
    the ``updated_version`` each decided frame had when it was read (the write
    re-checks it); ``version``, ``tick`` and ``trace`` are what was read;
    ``sensitive`` the sensitive content found, located and masked (in the frames
    looked at and in the observations numbered up to ``events``).
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
    sensitive: tuple[SensitiveFinding, ...] = ()
    events: int = 0

    @property
    def writes(self) -> bool:
        """Whether applying the plan may change something (an accept, a reject, a quarantine)
        or has something to audit (sensitive content found)."""
        return (
            bool(self.quarantine)
            or bool(self.sensitive)
            or any(d.verdict != "hold" for d in self.decisions)
        )


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
    scan_budget: int | None = MAX_SCAN_PER_PASS,
    stop: Callable[[], bool] | None = None,
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

    Sensitive content (:mod:`~protocol.governance.sensitive`) is looked for in
    the accepted frames the pass looks at (the frames it finds are quarantined
    like the others) and in the observations recorded after
    ``cursor.events`` (every observation in a full pass); the plan carries what
    it found, located and masked, for the report and the audit entry. The
    observations scanned in one pass are bounded by *scan_budget* characters and by
    *stop* (the caller's time budget, asked between observations): the next pass
    resumes where this one stopped (``events``).
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
        observed, events = scan_observations(view, 0, budget=scan_budget, stop=stop)
    else:
        observed, events = scan_observations(view, cursor.events, budget=scan_budget, stop=stop)
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
        ds = [pol.review(f, view) for f in sorted(waiting, key=frame_age)]
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
        findings, located = scan_frames(
            after,
            now_tick=tick,
            unused_ticks=unused_ticks,
            usage=(t for _, t in rows),
            failed_uses=failed_uses,
        )
        if changed is not None:  # a sweep reports the sensitive content of what changed only
            located = [s for s in located if s.ref in changed]
    else:
        # Frames admitted now were candidates, so they and what they contradict are in changed.
        scanned = [
            f
            for f in (now_frames.get(fid) or frame(fid) for fid in changed)
            if f is not None and is_checked(f)
        ]
        scanned.sort(key=frame_age)
        _, outcomes = usage_of(t for _, t in rows)
        if any(
            f.kind == "procedural" and not _settled(outcomes.get(f.id, []), failed_uses)
            for f in scanned
        ):  # the new traces do not settle a procedure: read its earlier uses too
            _, outcomes = usage_of(t for _, t in _traces_after(view, 0))
        findings, located = [], []
        for f in scanned:
            found, where = frame_checks(
                after,
                f,
                now_tick=tick,
                unused_ticks=None,
                last_seen={},
                outcomes=outcomes,
                failed_uses=failed_uses,
            )
            findings += found
            located += where
    reasons, spared = triage(after, findings)
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
        sensitive=(*located, *observed),
        events=events,
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
    admitted = decide_in(w, admit, now=now, reason=f"admission by policy:{name}", audit=audit)
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
    quarantined, scanned = quarantine_in(w, reasons, now=now, reviewer=WORKER, audit=audit)
    sensitive = with_actions(plan.sensitive, quarantined, plan.spared, later)
    # A deferred frame is decided, reported and audited by the next pass.
    record_sensitive(w, [s for s in sensitive if s.action != "deferred"], now=now, audit=audit)
    versions = [v for v in (admitted, scanned) if v is not None]
    # Nothing else was written since the read: what this write changed was judged already.
    version = w.meta().version if unmoved else plan.version
    return _pass_report(plan, admit, quarantined, versions, later, version, sensitive)


def _pass_report(
    plan: PassPlan,
    applied: Sequence[Decision],
    quarantined: Sequence[str],
    versions: Sequence[int],
    later: set[str],
    version: int,
    sensitive: Sequence[SensitiveFinding] = (),
) -> dict[str, Any]:
    held = [d.frame_id for d in plan.decisions if d.verdict == "hold"]
    cursor = PassCursor(
        version=version,
        trace=plan.trace,
        held=frozenset(held) | later,
        swept=plan.swept,
        options=plan.options,
        events=plan.events,
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
        "sensitive": [s.to_dict() for s in sensitive],
    }


def empty_report(plan: PassPlan) -> dict[str, Any]:
    """The report of applying a plan that writes nothing (no write is opened for it)."""
    return _pass_report(plan, [], [], [], set(), plan.version)


def apply_plan(
    w: WriteView, plan: PassPlan, *, now: float, audit: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Write what *plan* decided inside *w*, each decision re-checked against the current frame.

    A decision applies only if its frame is still what was read (still a
    candidate, or still accepted, with the same ``updated_version``); the
    others are left for the next pass (``deferred``, and held by the cursor),
    and so are the quarantines when an admission decision was left (the scan
    judged the state admission was to leave). Accepts and rejects are one
    governance transaction, quarantines a second, each audited when it changed
    something, and the sensitive content found is audited in the same write
    (outcome ``flagged``, masked). Answers ``{"decisions" (applied), "held",
    "quarantined", "spared", "versions", "deferred", "full", "cursor",
    "sensitive"}``; ``cursor`` is the :class:`PassCursor` for the next pass.
    """
    batch = BatchView(w)  # the re-checks and the decisions read each frame once
    report = _apply_in(cast(WriteView, batch), plan, now=now, audit=audit)
    batch.flush()
    return report
