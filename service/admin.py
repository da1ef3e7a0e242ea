"""The governance and history operations: the service functions :mod:`service.operations`
declares for admission, human review, what is pending, the quarantine scan, forgetting
and the paged export.

Each takes the :class:`~service.context.Context` first and the call's arguments after
it, checked against the argument model its signature describes
(:mod:`service.registry`); the domain's own checks (a review's decision word, a
forget's reason) are :mod:`protocol.governance`'s and :mod:`protocol.forget`'s, run
once, inside the run. The :class:`~service.registry.Caller` names who calls (the
capability's holder, ``embedded`` by default: the audit entries say so) and the
admission policy of the port (the default policy unless the port has its own). Every
port answers the same typed replies (:mod:`protocol.replies`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, Strict

import service.reads as reads
from protocol.forget import ForgetReport
from protocol.governance import Decision, SensitiveFinding, audit_template
from protocol.replies import AdmitReply, DecisionReply, PendingReply, ReviewReply, ScanReply
from service.registry import EMBEDDED as EMBEDDED_CALLER
from service.registry import Caller, Count, EventRef, FrameId, Text

if TYPE_CHECKING:
    from service.context import Context

__all__ = [
    "admit",
    "export",
    "export_history",
    "forget",
    "pending",
    "quarantine_scan",
    "review",
    "scan_observations",
]

ExportLimit = Annotated[int, Strict(), Field(ge=1, le=reads.MAX_EXPORT_PAGE)]
"""How many log records one export page holds."""
UnusedTicks = Annotated[int, Strict()]
"""Ticks unused before a frame is flagged (the scan's own check bounds it: ``check_scan``)."""


UNNAMED = "actor"
"""Who forgot, in a remote call that carried no capability (none is enforced)."""


def _audit(ctx: Context, method: str, caller: Caller) -> dict[str, Any]:
    """The audit template of a governance call by *caller*."""
    return audit_template(method, holder=caller.holder, context=ctx.name, tenant=ctx.meta().tenant)


def _decision(d: Decision) -> DecisionReply:
    return DecisionReply.of(d.to_dict())


def admit(
    ctx: Context, frame_id: FrameId | None = None, *, caller: Caller = EMBEDDED_CALLER
) -> AdmitReply:
    """Run the admission policy over the candidates (or just *frame_id*); audited.

    Accepted and rejected ones change in one governance transaction written with
    its audit entry; holds change nothing (``version`` None when nothing was
    written). NotFound for an unknown *frame_id*, ``not_candidate`` for one that
    is not a candidate. See :func:`service.governance.run_admission`.
    """
    from service.governance import run_admission

    decisions, version = run_admission(
        ctx.backend, policy=caller.policy, frame_id=frame_id, audit=_audit(ctx, "admit", caller)
    )
    return AdmitReply(decisions=[_decision(d) for d in decisions], version=version)


def review(
    ctx: Context,
    frame_id: FrameId,
    decision: Text,
    reviewer: Text,
    reason: Text | None = None,
    *,
    caller: Caller = EMBEDDED_CALLER,
) -> ReviewReply:
    """A human ``accept`` or ``reject`` of a candidate or quarantined frame; audited.

    Typed errors change nothing: ``bad_decision``, ``bad_reviewer`` (1 to 128
    printable characters), ``bad_argument`` (a reason over 512 characters),
    NotFound, ``not_reviewable``. See :func:`service.governance.run_review`.
    """
    from service.governance import run_review

    d, version = run_review(
        ctx.backend,
        frame_id,
        decision,
        reviewer,
        reason=reason,
        audit=_audit(ctx, "review", caller),
    )
    return ReviewReply(decision=_decision(d), version=version)


def pending(ctx: Context, *, caller: Caller = EMBEDDED_CALLER) -> PendingReply:
    """What awaits a human or admission, read-only: ``{version, items}``.

    One snapshot; a dry run of the port's admission policy
    (:func:`protocol.governance.pending`). Writes nothing, audits nothing.
    """
    from protocol.governance import pending as pending_in

    policy = caller.policy
    return ctx.backend.read(
        lambda v: PendingReply(version=v.meta().version, items=pending_in(v, policy))
    )


def scan_observations(ctx: Context, _args: Any) -> list[SensitiveFinding]:
    """The sensitive content of every observation: the part of a quarantine scan that reads
    without the writer (a remote port runs it off its store thread)."""
    from service.governance import scan_all_observations

    return scan_all_observations(ctx.backend)


def quarantine_scan(
    ctx: Context,
    unused_ticks: UnusedTicks | None = None,
    failed_uses: Annotated[int, Strict()] = 3,
    *,
    caller: Caller = EMBEDDED_CALLER,
    prepared: list[SensitiveFinding] | None = None,
) -> ScanReply:
    """Find low-quality frames and quarantine them in one audited write (R43).

    Frames a human accepted are reported under ``spared``, not quarantined;
    ``sensitive`` locates (masked) the secrets and personal data found in
    accepted frames and observations (an observation's remedy is ``forget``).
    OutOfRange for *unused_ticks* below 1 or *failed_uses* outside 1 to 1000.
    See :func:`service.governance.run_quarantine_scan`.
    """
    from protocol.governance import check_scan
    from service.governance import run_quarantine_scan

    check_scan(unused_ticks, failed_uses)
    result = run_quarantine_scan(
        ctx.backend,
        unused_ticks=unused_ticks,
        failed_uses=failed_uses,
        audit=_audit(ctx, "quarantine_scan", caller),
        observed=prepared,
    )
    return ScanReply.of(result.to_dict())


def forget(
    ctx: Context,
    target: EventRef,
    reason: Text | None = None,
    by: Text | None = None,
    *,
    caller: Caller = EMBEDDED_CALLER,
) -> ForgetReport:
    """Erase the content of *target* (``@eN``, an event id or a frame id); keep a tombstone.

    An observation's text, or every body a frame ever had, and the recall
    results that carried it, are overwritten in one write with the audit entry:
    the digest of what was erased, *by* (default the caller), when and *reason*
    (required: ``missing_reason``). The version does not change; forgetting twice
    answers the first tombstone with ``duplicate``. See ``docs/forget.md``.
    """
    from service.forget import forget_in_context

    who = caller.holder or UNNAMED
    return forget_in_context(
        ctx, target, reason=reason, by=who if by is None else by, now=time.time(), holder=who
    )


def export(
    ctx: Context, after_version: Count = 0, limit: ExportLimit = reads.MAX_EXPORT_PAGE
) -> dict[str, Any]:
    """One page of the history after *after_version*, for history checkers.

    ``log`` holds at most *limit* records; ``more`` says whether pages follow;
    ``frames``, ``events`` and ``relations`` come with the last page, from the
    same snapshot (:func:`service.reads.export_page`). Every port pages the
    same way; :func:`export_history` reads them all.
    """
    return ctx.backend.read(lambda v: reads.export_page(v, after_version, limit))


def export_history(port: Any, after_version: int = 0) -> dict[str, Any]:
    """The whole history after *after_version*, read page by page through *port*'s
    ``export`` (an embedded context or a handle): the last page with every page's log."""
    after = after_version
    log: list[Any] = []
    while True:
        page = dict(port.export(after))
        log.extend(page["log"])
        if not page["more"]:
            page["log"] = log
            return page
        after = page["log"][-1]["version"] if page["log"] else after + reads.MAX_EXPORT_PAGE
