"""The web inspector's reads of a context's audit log: rejected transactions by code and
by agent, and whether the audit chain is intact (:mod:`service.inspection` has the others).

They need what reading the audit needs (``admin`` on a served context: the actor's
``inspect_audit``). Work is bounded: :func:`rejections` looks through at most
:data:`MAX_REJECTION_SCAN` entries; :func:`chain` reads every entry, so a page asks for
it on demand.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from protocol.errors import OutOfRange, RequestError
from protocol.governance import REJECTED
from service.inspection import MAX_TX_PAGE, int_arg
from service.registry import Text

if TYPE_CHECKING:
    from service.context import Context

__all__ = ["AUDIT_VIEWS", "MAX_REJECTION_SCAN", "audit_view", "chain", "rejections"]

MAX_REJECTION_SCAN = 2_000
"""Most audit rows, newest first, one :func:`rejections` read looks through."""


AUDIT_VIEWS = ("rejections", "chain")
"""The inspector's reads of the audit log: they need what reading the audit needs."""


def rejections(ctx: Context, *, before: int | None = None, limit: int = 50) -> dict[str, Any]:
    """The newest rejected transactions, from the audit entries rejections leave.

    Looks through at most :data:`MAX_REJECTION_SCAN` audit rows numbered below
    *before* (default: from the newest). Answers ``{"rejections": [{"seq", "time",
    "last_time", "count", "agent", "code", "codes", "why", "base_version",
    "version", "client_id", "frames"}], "codes": {code: count}, "agents": {agent:
    count}, "scanned", "next"}``: counts add up coalesced rows (``count``) over the
    rows looked through; ``next`` is where to read on (None at the start of the log).
    A transaction a context actor decided more than once (held for its turn on a hot
    frame, then rejected again) counts once, as its newest entry.
    """
    if not 1 <= limit <= MAX_TX_PAGE:
        raise OutOfRange(f"limit must be between 1 and {MAX_TX_PAGE}, not {limit}")
    if before is not None and before < 0:
        raise OutOfRange(f"before must be >= 0, not {before}")
    rows = ctx.backend.audit_newest(before, MAX_REJECTION_SCAN)
    out: list[dict[str, Any]] = []
    codes: Counter[str] = Counter()
    agents: Counter[str] = Counter()
    seen: set[str] = set()
    for seq, rec in rows:
        if rec.get("method") != "submit" or rec.get("outcome") != REJECTED:
            continue
        client = rec.get("client_id")
        if isinstance(client, str) and int(rec.get("count") or 1) == 1:
            if client in seen:  # decided again (held for its turn on a hot frame): once
                continue
            seen.add(client)
        count = int(rec.get("count") or 1)
        agent = str(rec.get("holder") or "unknown")
        codes[str(rec.get("code") or "rejected")] += count
        agents[agent] += count
        if len(out) < limit:
            out.append(
                {
                    "seq": seq,
                    "agent": agent,
                    **{
                        k: rec.get(k)
                        for k in (
                            "time",
                            "last_time",
                            "count",
                            "code",
                            "codes",
                            "why",
                            "base_version",
                            "version",
                            "client_id",
                            "frames",
                        )
                    },
                }
            )
    full = len(rows) == MAX_REJECTION_SCAN
    return {
        "rejections": out,
        "codes": dict(codes.most_common()),
        "agents": dict(agents.most_common()),
        "scanned": len(rows),
        "next": rows[-1][0] if full and rows[-1][0] > 1 else None,
    }


def chain(ctx: Context) -> dict[str, Any]:
    """Whether the audit chain is intact under this machine's audit key
    (:func:`service.governance.verify_audit`, as ``morphz audit --verify`` checks it):
    the report's JSON form. Reads every audit row: the page asks for it on demand."""
    from service.governance import verify_audit
    from storage.keys import audit_key

    return verify_audit(ctx.backend, [audit_key()]).to_dict()


def audit_view(ctx: Context, view: Text, args: dict[str, Any]) -> dict[str, Any]:
    """One of :data:`AUDIT_VIEWS` with its arguments as a dict; ``bad_argument`` for an
    unknown view or argument."""
    allowed = {"rejections": {"before", "limit"}, "chain": set()}
    if view not in allowed:
        raise RequestError(f"no audit view {view[:40]!r}", code="bad_argument")
    extra = set(args) - allowed[view]
    if extra:
        raise RequestError(f"unknown argument {sorted(extra)[0][:40]!r}", code="bad_argument")
    if view == "chain":
        return chain(ctx)
    return rejections(
        ctx, before=int_arg(args, "before", None), limit=int_arg(args, "limit", 50) or 0
    )
