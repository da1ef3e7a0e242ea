"""Argument checks of the governance calls, run before anything is read.

Every refusal is a typed :class:`~protocol.errors.RequestError` (or its
:class:`~protocol.errors.OutOfRange`) with a stable code, so each port (the
embedded API, the context actor and its client, the CLI) refuses the same
request the same way.
"""

from __future__ import annotations

from protocol.errors import OutOfRange, RequestError

MAX_AUDIT_PAGE = 1000
"""Most audit entries one read returns."""
MAX_REVIEWER = 128
"""Characters of a human reviewer's name."""
MAX_REASON = 512
"""Characters of a human review's reason."""
MAX_FAILED_USES = 1000
"""Largest ``failed_uses`` a quarantine scan accepts."""
MIN_EVERY = 0.01
"""Fewest seconds between two unattended passes."""
MAX_EVERY = 86_400.0
"""Most seconds between two unattended passes."""


def check_frame_id(frame_id: object) -> None:
    """Refuse a frame id that is not a string (``bad_argument``)."""
    if not isinstance(frame_id, str):
        raise RequestError("a frame id is a string", code="bad_argument")


def check_page(after: object, limit: object, *, most: int = MAX_AUDIT_PAGE) -> tuple[int, int]:
    """*after* (an integer >= 0) and *limit* (1 to *most*) of a paged read, or a typed error."""
    for value, what in ((after, "after"), (limit, "limit")):
        if not isinstance(value, int) or isinstance(value, bool):
            raise RequestError(
                f"{what} must be an integer, not {type(value).__name__}", code="bad_argument"
            )
    assert isinstance(after, int) and isinstance(limit, int)
    if not 0 <= after < 1 << 63:
        raise OutOfRange(f"after must be between 0 and 2**63-1, not {after}")
    if not 1 <= limit <= most:
        raise OutOfRange(f"limit must be between 1 and {most}, not {limit}")
    return after, limit


def check_review(decision: object, reviewer: object, reason: object = None) -> None:
    """Refuse a bad review request before anything is read: ``bad_decision``,
    ``bad_reviewer`` (1 to 128 printable characters) or ``bad_argument`` (reason)."""
    if decision not in ("accept", "reject"):
        raise RequestError(
            f"a review decides accept or reject, not {decision!r}", code="bad_decision"
        )
    if (
        not isinstance(reviewer, str)
        or not 1 <= len(reviewer) <= MAX_REVIEWER
        or not reviewer.isprintable()
        or not reviewer.strip()
    ):
        raise RequestError(
            f"a reviewer is 1 to {MAX_REVIEWER} printable characters, not {reviewer!r}",
            code="bad_reviewer",
        )
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise RequestError(
            f"a review reason is text of at most {MAX_REASON} characters", code="bad_argument"
        )


def check_scan(unused_ticks: object, failed_uses: object) -> None:
    """Refuse bad quarantine-scan options: ``unused_ticks`` None or >= 1, ``failed_uses`` 1-1000."""
    if unused_ticks is not None and (
        not isinstance(unused_ticks, int) or isinstance(unused_ticks, bool) or unused_ticks < 1
    ):
        raise OutOfRange(f"unused_ticks must be None or an integer >= 1, not {unused_ticks!r}")
    if not isinstance(failed_uses, int) or isinstance(failed_uses, bool):
        raise RequestError(
            f"failed_uses must be an integer, not {failed_uses!r}", code="bad_argument"
        )
    if not 1 <= failed_uses <= MAX_FAILED_USES:
        raise OutOfRange(f"failed_uses must be between 1 and {MAX_FAILED_USES}, not {failed_uses}")


def check_every(every: object) -> float:
    """Seconds between governance passes: a number from 0.01 to 86400."""
    if not isinstance(every, (int, float)) or isinstance(every, bool):
        raise RequestError(f"every must be seconds, not {every!r}", code="bad_argument")
    if not MIN_EVERY <= float(every) <= MAX_EVERY:
        raise OutOfRange(f"every must be between {MIN_EVERY} and {MAX_EVERY} s, not {every}")
    return float(every)
