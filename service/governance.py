"""Governance runs over a store: admission, review, quarantine, the unattended pass, the audit log.

Each ``run_*`` function checks its arguments first (nothing is read on a bad
request), reads the clock once, and decides through the store's ``transact``
with the pure rules of :mod:`protocol.governance`, writing its audit entry in
the same write (*audit* is the entry's template, see
:func:`~protocol.governance.audit_template`). ``Context.admit``, ``review`` and
``quarantine``, the context actor and the CLI are thin calls to them.

:class:`GovernanceWorker` runs :func:`run_pass` periodically on a daemon thread
beside an embedded :class:`~service.context.Context` (the context actor runs
passes on its store thread instead).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from protocol.errors import RequestError
from protocol.governance import (
    MAX_AUDIT_PAGE,
    QUARANTINE_REVIEWER,
    WORKER,
    AdmissionPolicy,
    ChainReport,
    Decision,
    DefaultPolicy,
    Finding,
    PassCursor,
    PassPlan,
    ScanResult,
    SensitiveFinding,
    admit_in,
    apply_plan,
    audit_entry,
    audit_template,
    check_every,
    check_frame_id,
    check_page,
    check_review,
    check_scan,
    empty_report,
    plan_pass,
    quarantine_in,
    request_reasons,
    review_in,
    scan_in,
    scan_observations,
    verify_chain,
)
from protocol.view import Changeset
from storage.backend import Backend

log = logging.getLogger("morphz.governance")

SCAN_BUDGET_SECONDS = 0.5
"""Seconds one unattended pass spends scanning observations at most (the next pass goes on)."""


def scan_deadline(seconds: float) -> Callable[[], bool]:
    """A *stop* for :func:`~protocol.governance.plan_pass`: True once *seconds* have passed."""
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


def scan_all_observations(store: Backend) -> list[SensitiveFinding]:
    """Sensitive content in every observation, on one read snapshot (no write lock held)."""
    observed, _ = store.read(lambda v: scan_observations(v, 0))
    return observed


class AuditStore(Protocol):
    """A store that keeps an audit table: both backends (``MemoryBackend``, ``LmdbStore``)."""

    def audit_read(self, after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *limit* audit records numbered above *after*, ascending."""
        ...


def read_audit(store: AuditStore, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
    """The audit entries numbered above *after*, at most *limit* (1 to 1000), oldest first.

    Each is the record with its number under ``seq``. A coalesced row's
    ``count`` and ``last_time`` may grow after it was read (within its window).
    """
    after, limit = check_page(after, limit)
    return [{"seq": n, **rec} for n, rec in store.audit_read(after, limit)]


def verify_audit(
    store: AuditStore, keys: Sequence[bytes], anchor: tuple[int, str] | None = None
) -> ChainReport:
    """Check the audit chain of *store* under *keys* (:func:`~protocol.governance.verify_chain`),
    and that it reaches *anchor* (a ``(seq, mac)`` head exported earlier), reading every row."""
    rows: list[tuple[int, dict[str, Any]]] = []
    after = 0
    while True:
        page = store.audit_read(after, MAX_AUDIT_PAGE)
        rows.extend(page)
        if len(page) < MAX_AUDIT_PAGE:
            break
        after = page[-1][0]
    return verify_chain(rows, keys, anchor=anchor)


def record_audit(store: Backend, records: Sequence[Mapping[str, Any]]) -> None:
    """Append audit *records* in one durable write of *store*; version and state unchanged."""
    batch = [dict(r) for r in records]
    if batch:
        store.transact(lambda w: w.apply(Changeset(audit=batch)))


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
    *audit* is the entry's template (``method``, ``op``, ``holder``, context …);
    *now* defaults to the clock. Raises NotFound for an unknown *frame_id*,
    ``not_candidate`` for a frame that is not a candidate (or retired),
    ``bad_argument`` for a *frame_id* that is not a string; nothing changes then.
    """
    if frame_id is not None:
        check_frame_id(frame_id)
    pol: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
    when = time.time() if now is None else now
    return store.transact(lambda w: admit_in(w, pol, frame_id, now=when, audit=audit))


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
    ``bad_argument`` (:func:`~protocol.governance.check_review`), NotFound,
    ``not_reviewable``.
    """
    check_review(decision, reviewer, reason)
    check_frame_id(frame_id)
    when = time.time() if now is None else now
    return store.transact(
        lambda w: review_in(w, frame_id, decision, reviewer, reason=reason, now=when, audit=audit)
    )


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
    reasons = request_reasons(findings)
    when = time.time() if now is None else now
    return store.transact(
        lambda w: quarantine_in(w, reasons, now=when, reviewer=reviewer, audit=audit)
    )


def run_quarantine_scan(
    store: Backend,
    *,
    unused_ticks: int | None = None,
    failed_uses: int = 3,
    reviewer: str = QUARANTINE_REVIEWER,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
    observed: Sequence[SensitiveFinding] | None = None,
) -> ScanResult:
    """:func:`~protocol.governance.find_low_quality` over every trace, then quarantine,
    in one audited write; and every observation checked for sensitive content.

    Accepted frames holding sensitive content (secrets, personal data) are
    quarantined with the others; what it found in frames and in observations
    is reported under ``sensitive``, located (record, id, field, offsets,
    rule) with a masked excerpt, and audited in the same write (outcome
    ``flagged``). An observation cannot be quarantined: ``forget`` erases it.
    Frames a human accepted (``reviewed_by`` ``human:…``) are reported but
    spared: only a human undoes a human decision (``Context.quarantine([id])``
    then a review). Nothing is written, nor audited, when nothing is
    quarantined and nothing sensitive was found. The observations are read
    before the write (their text does not change; reading them does not hold
    the writer lock); *observed*, when given, is that scan done beforehand
    (:func:`scan_all_observations`, e.g. on another thread).
    """
    check_scan(unused_ticks, failed_uses)
    if observed is None:
        observed = scan_all_observations(store)
    when = time.time() if now is None else now
    return store.transact(
        lambda w: scan_in(
            w,
            now=when,
            unused_ticks=unused_ticks,
            failed_uses=failed_uses,
            reviewer=reviewer,
            audit=audit,
            observations=observed,
        )
    )


def apply_pass(
    store: Backend,
    plan: PassPlan,
    *,
    now: float | None = None,
    audit: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write what *plan* decided (:func:`~protocol.governance.apply_plan`) through *store*.

    A write transaction is opened only when the plan accepts, rejects or
    quarantines something. Inside it, a decision applies only if its frame is
    still what was read; the others are left for the next pass (``deferred``,
    and held by the cursor). Answers ``{"decisions" (applied), "held",
    "quarantined", "spared", "versions", "deferred", "full", "cursor",
    "sensitive"}``; ``cursor`` is the :class:`~protocol.governance.PassCursor`
    for the next pass; ``sensitive`` the secrets and personal data found
    (located, masked; audited in the same write, outcome ``flagged``).
    """
    when = time.time() if now is None else now
    if not plan.writes:
        return empty_report(plan)
    return store.transact(lambda w: apply_plan(w, plan, now=when, audit=audit))


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
    """One unattended governance pass: :func:`~protocol.governance.plan_pass` on a read,
    then :func:`apply_pass`.

    Admission's accepts and rejects (one governance transaction), then the
    quarantine of what the scan finds in the state they leave, sparing frames a
    human accepted (a second transaction), both in one write that is opened
    only when there is something to write; each is audited when it changed
    something. Without *cursor* the pass looks at everything (every
    observation too, for sensitive content); pass the report's ``cursor`` to
    the next call to look only at what changed since (and the observations
    recorded since). Answers ``{"decisions", "held", "quarantined", "spared",
    "versions", "deferred", "full", "cursor", "sensitive"}`` (see :func:`apply_pass`).
    """
    check_scan(unused_ticks, failed_uses)
    pol: AdmissionPolicy = policy if policy is not None else DefaultPolicy()
    plan = store.read(
        lambda v: plan_pass(
            v, policy=pol, unused_ticks=unused_ticks, failed_uses=failed_uses, cursor=cursor
        )
    )
    return apply_pass(store, plan, now=now, audit=audit)


class GovernanceWorker:
    """Runs :func:`run_pass` every *every* seconds on a daemon thread, unattended (R43).

    For a :class:`~service.context.Context` used without Ray (pass the context or
    its backend). The first pass looks at everything; each later one carries
    the previous pass's :class:`~protocol.governance.PassCursor` and looks only
    at what changed since. A pass decides on a read snapshot and opens a write
    only when it has something to write; inside it, each decision is
    re-checked against the current frame (both stores serialize write
    transactions), so it is safe beside the application's own calls: a
    decision made on a frame that changed meanwhile is left for the next pass.
    A failing pass is logged, counted in :attr:`errors`, audited (outcome
    ``error``) when the store still writes, and the next pass runs as usual
    from the last good cursor. Call :meth:`stop` before closing the context; a
    pass in progress finishes first. ``with GovernanceWorker(ctx, every=60):``
    starts and stops it.
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
                        at=time.time(),
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
