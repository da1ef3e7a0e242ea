"""Memory governance rules (R41–R43): admission, review, quarantine and the audit log.

Pure rules over :class:`~protocol.view.ReadView` and
:class:`~protocol.view.WriteView`; nothing here does I/O, starts a thread or
reads a clock: time is passed in as ``now``. The runs over a store (``run_*``,
``record_audit``, ``read_audit``) and the background worker are in
:mod:`service.governance`.

* :mod:`~protocol.governance.policy`: an :class:`AdmissionPolicy` reviews one
  candidate and returns a :class:`Decision` (its :data:`Ruling`: ``accept``,
  ``reject`` or ``hold``); :class:`DefaultPolicy` checks source, scope,
  sensitive content, conflicts and risk (R42); :func:`pending` lists what
  awaits a human, computed read-only.
* :mod:`~protocol.governance.decisions`: :func:`decide` turns rulings into one
  recorded runtime transaction (log kind ``governance``); :func:`admit_in` and
  :func:`review_in` apply them inside a write with their audit entry.
* :mod:`~protocol.governance.quarantine`: :func:`find_low_quality` (R43) and
  the quarantine of what it finds (:func:`scan_in`, :func:`quarantine_in`);
  :func:`scan_frames` and :func:`scan_observations` locate sensitive content
  in accepted frames and in observations.
* :mod:`~protocol.governance.sensitive`: the rules for secrets and personal
  data (:data:`SENSITIVE_RULES`), :func:`locate_sensitive`,
  :func:`mask_excerpt` and :class:`SensitiveFinding` (located, masked).
* :mod:`~protocol.governance.audit`: :func:`audit_entry`,
  :func:`audit_template` and :func:`append_audit`, the one append rule both
  stores run inside a write (refusals coalesce and are capped).
* :mod:`~protocol.governance.passes`: the unattended pass, decided on a read
  (:func:`plan_pass`) and written only when it decided something
  (:func:`apply_plan`); from a :class:`PassCursor` it looks only at what
  changed since the last pass.
* :mod:`~protocol.governance.checks`: the argument checks every port runs
  before anything is read.

See ``docs/governance.md`` for the decisions behind these rules.
"""

from protocol.governance.audit import (
    AUDIT_REFUSALS_PER_WINDOW,
    AUDIT_WINDOW,
    CHECKPOINT,
    EMBEDDED,
    GENESIS,
    MAX_AUDIT_REFUSALS,
    MAX_AUDIT_TEXT,
    REJECTED,
    WORKER,
    AuditRows,
    ChainReport,
    append_audit,
    audit_entry,
    audit_template,
    chain_mac,
    key_id,
    printable,
    rejection_entry,
    verify_chain,
)
from protocol.governance.checks import (
    MAX_AUDIT_PAGE,
    MAX_EVERY,
    MAX_REASON,
    MAX_REVIEWER,
    MIN_EVERY,
    check_every,
    check_frame_id,
    check_page,
    check_review,
    check_scan,
)
from protocol.governance.decisions import (
    admit_in,
    decide,
    decide_in,
    decision_audit,
    replay_decisions,
    review_in,
)
from protocol.governance.passes import (
    PassCursor,
    PassPlan,
    apply_plan,
    empty_report,
    plan_pass,
)
from protocol.governance.policy import (
    MAX_PENDING_BODY,
    REVIEWABLE,
    AdmissionPolicy,
    Decision,
    DefaultPolicy,
    Ruling,
    admission_decisions,
    body_text,
    candidates,
    pending,
)
from protocol.governance.quarantine import (
    CONTRADICTS,
    MAX_AUDITED_FINDINGS,
    QUARANTINE_REVIEWER,
    Finding,
    ScanResult,
    all_traces,
    find_low_quality,
    quarantine_in,
    request_reasons,
    scan_frames,
    scan_in,
    scan_observations,
    sensitive_audit,
)
from protocol.governance.sensitive import (
    MASK,
    MAX_SCAN_CHARS,
    PERSONAL_PATTERNS,
    SECRET_PATTERNS,
    SENSITIVE_RULES,
    UNSCANNED,
    SensitiveFinding,
    SensitiveRule,
    SensitiveSpan,
    locate_sensitive,
    mask_excerpt,
    sensitive_findings,
)

__all__ = [
    "AUDIT_REFUSALS_PER_WINDOW",
    "AUDIT_WINDOW",
    "AdmissionPolicy",
    "AuditRows",
    "CHECKPOINT",
    "ChainReport",
    "GENESIS",
    "chain_mac",
    "key_id",
    "printable",
    "rejection_entry",
    "verify_chain",
    "CONTRADICTS",
    "Decision",
    "DefaultPolicy",
    "EMBEDDED",
    "Finding",
    "MASK",
    "MAX_AUDITED_FINDINGS",
    "MAX_AUDIT_PAGE",
    "MAX_AUDIT_REFUSALS",
    "MAX_AUDIT_TEXT",
    "REJECTED",
    "MAX_EVERY",
    "MAX_PENDING_BODY",
    "MAX_REASON",
    "MAX_REVIEWER",
    "MIN_EVERY",
    "MAX_SCAN_CHARS",
    "PERSONAL_PATTERNS",
    "PassCursor",
    "PassPlan",
    "QUARANTINE_REVIEWER",
    "REVIEWABLE",
    "Ruling",
    "SECRET_PATTERNS",
    "SENSITIVE_RULES",
    "ScanResult",
    "SensitiveFinding",
    "SensitiveRule",
    "SensitiveSpan",
    "UNSCANNED",
    "WORKER",
    "admission_decisions",
    "admit_in",
    "all_traces",
    "append_audit",
    "apply_plan",
    "audit_entry",
    "audit_template",
    "body_text",
    "candidates",
    "check_every",
    "check_frame_id",
    "check_page",
    "check_review",
    "check_scan",
    "decide",
    "decide_in",
    "decision_audit",
    "empty_report",
    "find_low_quality",
    "locate_sensitive",
    "mask_excerpt",
    "pending",
    "plan_pass",
    "quarantine_in",
    "replay_decisions",
    "request_reasons",
    "review_in",
    "scan_frames",
    "scan_in",
    "scan_observations",
    "sensitive_audit",
    "sensitive_findings",
]
