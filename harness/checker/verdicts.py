"""What the history checker takes and answers: submissions, violations, verdicts."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from protocol.receipts import Receipt
from protocol.tx import ContextTx

LOG_GAP = "log_gap"
"""The log's versions are not exactly 1..N, or a record has no usable version."""
REPLAY_DIVERGED = "replay_diverged"
"""A log record does not replay as logged (rejected, other version, other changes)."""
REPLAY_MISMATCH = "replay_mismatch"
"""Replaying the whole log does not end in the final state."""
LOST_UPDATE = "lost_update"
"""A committed transaction's footprint changed between its base and its commit."""
UNJUSTIFIED_CONFLICT = "unjustified_conflict"
"""A conflict rejection names no conflict, or one the log does not show."""
UNJUSTIFIED_TOO_OLD = "unjustified_too_old"
"""A ``too_old`` rejection of a base within the kept history."""
DUPLICATE_APPLY = "duplicate_apply"
"""One client id on more than one log record."""
LOST_ACK = "lost_ack"
"""An acknowledged commit that the log does not hold under its client id."""
LOST_EDIT = "lost_edit"
"""A field of a frame does not hold what its logged edits make of it, in order: an
``append`` lost or applied twice, an ``incr`` not counted, a ``set`` not kept."""

VIOLATION_KINDS = (
    DUPLICATE_APPLY,
    LOG_GAP,
    LOST_ACK,
    LOST_EDIT,
    LOST_UPDATE,
    REPLAY_DIVERGED,
    REPLAY_MISMATCH,
    UNJUSTIFIED_CONFLICT,
    UNJUSTIFIED_TOO_OLD,
)
"""Every kind of :class:`Violation` the checker reports."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Submission(_Model):
    """One submitted transaction as its client saw it.

    ``footprint`` holds the footprint keys of the transaction (reads and
    writes of :meth:`~protocol.tx.ContextTx.footprint`: ``f:<id>``,
    ``e:@eN``, ``r:<s>\\x00<label>\\x00<o>``); ``source_events`` are those of
    them that are event references read as ``from`` sources, which the
    conflict check ignores. ``outcome`` is ``unknown`` when no reply came
    (the actor died, the reply was lost). ``version`` is the commit version,
    or the context version at rejection. ``conflicts`` are the receipt's
    ``(display id, version)`` pairs, ``error_code`` the first error's code,
    ``duplicate`` whether the receipt was returned for a known client id.
    """

    client_id: str
    thread: str
    base_version: int
    footprint: tuple[str, ...]
    outcome: Literal["committed", "rejected", "unknown"]
    version: int | None = None
    conflicts: tuple[tuple[str, int], ...] = ()
    error_code: str | None = None
    duplicate: bool = False
    attempt: int = 1
    source_events: tuple[str, ...] = ()

    @classmethod
    def from_receipt(
        cls,
        client_id: str,
        thread: str,
        tx: ContextTx,
        receipt: Receipt,
        attempt: int = 1,
    ) -> Submission:
        """The submission of *tx* under *client_id* that got *receipt* back."""
        footprint, source_events = footprint_of(tx)
        return cls(
            client_id=client_id,
            thread=thread,
            base_version=tx.base_version,
            footprint=footprint,
            source_events=source_events,
            outcome=receipt.status,
            version=receipt.version,
            conflicts=tuple((c.id, c.version) for c in receipt.conflicts),
            error_code=receipt.errors[0].code if receipt.errors else None,
            duplicate=receipt.duplicate,
            attempt=attempt,
        )

    @classmethod
    def unknown(cls, client_id: str, thread: str, tx: ContextTx, attempt: int = 1) -> Submission:
        """The submission of *tx* under *client_id* that got no reply."""
        footprint, source_events = footprint_of(tx)
        return cls(
            client_id=client_id,
            thread=thread,
            base_version=tx.base_version,
            footprint=footprint,
            source_events=source_events,
            outcome="unknown",
            attempt=attempt,
        )

    def checked_keys(self) -> frozenset[str]:
        """The footprint keys a conflict check looks at: all but event sources."""
        return frozenset(self.footprint) - frozenset(self.source_events)


class Violation(_Model):
    """One property the history breaks: its kind (see :data:`VIOLATION_KINDS`) and why."""

    kind: str
    detail: str


class Counts(_Model):
    """Submissions by outcome (duplicates included), and log records replayed."""

    committed: int = 0
    rejected: int = 0
    unknown: int = 0
    replayed: int = 0


class Verdict(_Model):
    """The result of :func:`check_history`: ok exactly when no violation was found."""

    violations: list[Violation]
    counts: Counts

    @property
    def ok(self) -> bool:
        """True if the history satisfies every checked property."""
        return not self.violations

    def kinds(self) -> set[str]:
        """The kinds of the violations found."""
        return {v.kind for v in self.violations}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``ok``, ``counts`` and ``violations``."""
        return {
            "ok": self.ok,
            "counts": self.counts.model_dump(),
            "violations": [v.model_dump() for v in self.violations],
        }

    def summary(self) -> str:
        """One line: ok and the counts, or the violations by kind and the first one."""
        c = self.counts
        counts = (
            f"{c.committed} committed, {c.rejected} rejected, {c.unknown} unknown, "
            f"{c.replayed} log records replayed"
        )
        if self.ok:
            return f"ok: {counts}"
        by_kind = Counter(v.kind for v in self.violations)
        kinds = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(by_kind.items()))
        first = self.violations[0]
        return (
            f"{len(self.violations)} violation(s) ({kinds}) in {counts}; "
            f"first: {first.kind}: {first.detail}"
        )


def footprint_of(tx: ContextTx) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """*tx*'s footprint keys (reads and writes) and the event sources among them, sorted."""
    reads, writes = tx.footprint()
    return (
        tuple(sorted(reads | writes)),
        tuple(sorted(k for k in reads if k.startswith("e:"))),
    )
