"""The governance part of the :class:`~service.context.Context` API (R41-R43).

Low-quality findings and quarantine on request, as methods of a context: each is a
thin call to a run of :mod:`service.governance` (the rules are
:mod:`protocol.governance`'s), audited with holder ``embedded``. Admission, review,
what is pending, the quarantine scan and forgetting are registered operations
(:mod:`service.admin`), served by every port. :class:`GovernanceAPI` is a base of
:class:`~service.context.Context`; it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from protocol.governance import Finding
from protocol.state import Meta
from storage.backend import Backend


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
