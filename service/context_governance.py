"""The governance part of the :class:`~service.context.Context` API (R41-R43).

Admission, human review, what is pending, the audit log, low-quality findings and
quarantine, as methods of a context: each is a thin call to a run of
:mod:`service.governance` (the rules are :mod:`protocol.governance`'s) with the
audit holder ``embedded`` unless the caller names one. :class:`GovernanceAPI` is
a base of :class:`~service.context.Context`; it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from protocol.governance import AdmissionPolicy, Decision, Finding, ScanResult
from protocol.state import Meta
from storage.backend import Backend

if TYPE_CHECKING:
    from protocol.forget import ForgetReport


class GovernanceAPI:
    """Governance runs over this context's store; see the module docstring."""

    backend: Backend
    name: str
    _meta: Meta

    def _governance_audit(self, method: str, holder: str | None = None) -> dict[str, Any]:
        """The audit template of a governance call: *holder*, by default ``embedded``."""
        from protocol.governance import EMBEDDED, audit_template

        return audit_template(
            method, holder=holder or EMBEDDED, context=self.name, tenant=self._meta.tenant
        )

    def admit(
        self,
        frame_id: str | None = None,
        policy: AdmissionPolicy | None = None,
        *,
        holder: str | None = None,
    ) -> list[Decision]:
        """Run admission over the candidates (or just *frame_id*); see :mod:`protocol.governance`.

        Accepted and rejected ones change in one recorded runtime transaction
        (``reviewed_by`` ``policy:<name>``) written with its audit entry (holder
        *holder*, default ``embedded``; method ``admit``); held ones stay candidates until
        :meth:`review`, and a pass of holds only writes nothing. Returns every
        decision, oldest candidate first. NotFound for an unknown *frame_id*,
        RequestError ``not_candidate`` for one that is not a candidate; nothing
        changes then. See :func:`service.governance.run_admission`.
        """
        from service.governance import run_admission

        decisions, _ = run_admission(
            self.backend,
            policy=policy,
            frame_id=frame_id,
            audit=self._governance_audit("admit", holder),
        )
        return decisions

    def review(
        self,
        frame_id: str,
        decision: str,
        reviewer: str,
        *,
        reason: str | None = None,
        holder: str | None = None,
    ) -> Decision:
        """A human decision (``accept`` or ``reject``) on a candidate or quarantined frame.

        Recorded as a runtime transaction with ``reviewed_by`` ``human:<reviewer>``
        (*reason* joins the review reasons) and its audit entry (holder
        *holder*, default ``embedded``; method ``review``) in one write. Typed errors change
        nothing: RequestError ``bad_decision``, ``bad_reviewer`` (1 to 128
        printable characters), ``bad_argument`` (reason over 512 characters),
        NotFound for an unknown frame, ``not_reviewable`` for a frame that is
        neither a candidate nor quarantined, or is retired. See
        :func:`service.governance.run_review`.
        """
        from service.governance import run_review

        d, _ = run_review(
            self.backend,
            frame_id,
            decision,
            reviewer,
            reason=reason,
            audit=self._governance_audit("review", holder),
        )
        return d

    def pending(self, policy: AdmissionPolicy | None = None) -> dict[str, Any]:
        """What awaits a human or admission, read-only: ``{"version", "items"}``.

        One snapshot; see :func:`protocol.governance.pending` (a dry run of
        *policy*, default ``DefaultPolicy``). Writes nothing, audits nothing.
        """
        from protocol.governance import pending

        return self.backend.read(
            lambda v: {"version": v.meta().version, "items": pending(v, policy)}
        )

    def find_low_quality(
        self, *, unused_ticks: int | None = None, failed_uses: int = 3
    ) -> list[Finding]:
        """:func:`protocol.governance.find_low_quality` over this context and all its traces.

        Contradicted, failing and unused frames, and accepted frames holding
        secrets or personal data (rule ``sensitive_content``). One snapshot;
        writes nothing. OutOfRange for *unused_ticks* below 1 or
        *failed_uses* outside 1 to 1000.
        """
        from protocol.governance import all_traces, check_scan, find_low_quality

        check_scan(unused_ticks, failed_uses)
        return self.backend.read(
            lambda v: find_low_quality(
                v,
                now_tick=v.meta().tick,
                unused_ticks=unused_ticks,
                usage=all_traces(v),
                failed_uses=failed_uses,
            )
        )

    def quarantine(self, findings: Iterable[Finding | str]) -> list[str]:
        """Move accepted frames to trust ``quarantined`` (R43): out of every input until reviewed.

        One recorded runtime transaction with its audit entry (holder
        ``embedded``, method ``quarantine``); frames not accepted, retired or
        unknown are skipped (nothing is written when none is left). A frame a
        human accepted is quarantined too: this is how a human decision is
        reopened. Returns the ids quarantined. See
        :func:`service.governance.run_quarantine`.
        """
        from service.governance import run_quarantine

        ids, _ = run_quarantine(self.backend, findings, audit=self._governance_audit("quarantine"))
        return ids

    def quarantine_scan(
        self, *, unused_ticks: int | None = None, failed_uses: int = 3, holder: str | None = None
    ) -> ScanResult:
        """Find low-quality frames and quarantine them in one audited write (R43).

        Like the actor's ``quarantine_scan`` and ``morphz review scan``: frames a
        human accepted are reported under ``spared``, not quarantined. Accepted
        frames holding secrets or personal data are quarantined too, and every
        observation is checked: ``ScanResult.sensitive`` locates what was found
        (record, id, field, offsets, rule, a masked excerpt; an observation's
        remedy is ``forget``). The audit entries name *holder* (default
        ``embedded``). See :func:`service.governance.run_quarantine_scan`.
        """
        from service.governance import run_quarantine_scan

        return run_quarantine_scan(
            self.backend,
            unused_ticks=unused_ticks,
            failed_uses=failed_uses,
            audit=self._governance_audit("quarantine_scan", holder),
        )

    def forget(
        self,
        target: str,
        *,
        reason: str | None,
        by: str | None = None,
        holder: str | None = None,
    ) -> ForgetReport:
        """Erase the content of *target* (``@eN``, an event id, or a frame id); keep a tombstone.

        An observation's text, or every body a frame ever had (current record,
        history rows, the log records that wrote it), and the recall results
        that carried it, are overwritten in one write with the audit entry
        (method ``forget``, holder *holder*, default ``embedded``): the digest
        of what was erased, *by* (default the holder), when and *reason*
        (required). The version does not change; forgetting twice answers the
        first tombstone with ``duplicate``. See :mod:`service.forget` and
        ``docs/forget.md``.
        """
        import time

        from protocol.governance import EMBEDDED
        from service.forget import forget_in_context

        who = holder or EMBEDDED
        return forget_in_context(
            self,  # type: ignore[arg-type]
            target,
            reason=reason,
            by=who if by is None else by,
            now=time.time(),
            holder=who,
        )
