"""History checks shared by the Ray tests: what the context's log must say after a run."""

from __future__ import annotations

from collections import Counter
from typing import Any


def check_history(export: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, int]:
    """Assert that the log agrees with the agents' records; return the outcome counts.

    * versions are 1..N without gaps, and no client id appears twice in the log;
    * every committed record is in the log exactly once, at its receipt's version;
    * no rejected submission is in the log; an unknown one is there at most once.
    """
    log = export["log"]
    assert [rec["version"] for rec in log] == list(range(1, len(log) + 1))
    ids = Counter(rec["client_id"] for rec in log if rec["client_id"] is not None)
    assert not [cid for cid, n in ids.items() if n > 1], "a client id was applied twice"
    at = {rec["client_id"]: rec["version"] for rec in log if rec["client_id"] is not None}
    for r in records:
        cid = r["client_id"]
        if r["outcome"] == "committed":
            assert at.get(cid) == r["version"], r
        elif r["outcome"] == "rejected":
            assert cid not in at, r
    return dict(Counter(r["outcome"] for r in records))


def check_steps(
    records: list[dict[str, Any]], *, threads: int, transactions: int, max_attempts: int = 5
) -> dict[tuple[str, int], dict[str, Any]]:
    """Assert that every planned step ended in a final record; return the last record of each.

    A step ends committed, unknown (the actor was unreachable), or rejected with a
    retryable code after its last attempt; any other rejection is a workload bug.
    """
    assert all(r["outcome"] != "skipped" for r in records), "a step could not read the context"
    for r in records:
        if r["outcome"] == "rejected":
            assert r["error_code"] in ("conflict", "too_old"), r
            assert r["conflicts"] or r["error_code"] == "too_old", r
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        last[(r["thread"], r["step"])] = r
    assert len(last) == threads * transactions
    for r in last.values():
        assert r["outcome"] in ("committed", "unknown") or r["attempt"] == max_attempts, r
    committed = sum(r["outcome"] == "committed" for r in last.values())
    assert committed >= threads * transactions // 2
    return last
