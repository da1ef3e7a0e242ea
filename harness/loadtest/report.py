"""The figures of a load test: outcome counts, throughput, latency, and the report's keys."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

MAX_VIOLATIONS = 200
"""Violations listed in a report (all are counted)."""

REPORT_KEYS = (
    "run_id",
    "workload",
    "threads",
    "contexts",
    "agents",
    "pipeline",
    "conflict_rate",
    "shared_frames",
    "seed",
    "requested",
    "duration_s",
    "steps",
    "submitted",
    "committed",
    "rebased",
    "rejected",
    "retried",
    "unknown",
    "skipped",
    "gave_up",
    "duplicates",
    "throughput_tx_s",
    "latency_ms",
    "cpu_ms_per_commit",
    "calls_per_commit",
    "bookkeeping",
    "baseline",
    "ratio_to_baseline",
    "kills",
    "kill_log",
    "kill_misses",
    "contention",
    "history_ok",
    "violations",
    "violation_count",
    "checked",
    "per_context",
    "store",
    "store_kept",
    "namespace",
    "interrupted",
)
"""Keys of the dict :func:`~harness.loadtest.run.run_loadtest` answers, in order.

``interrupted`` is true when the run was cut short (SIGINT): the figures and
the history check cover what was submitted until then. ``store_kept`` is false
when the run made a temporary store and removed it. ``contention`` holds the
shared-frame mode, the ``conflict`` rejections, how many of them were *false*
(:func:`conflict_counts`), and rejections and false conflicts per 1,000 commits.
``cpu_ms_per_commit``, ``calls_per_commit`` and ``bookkeeping`` are
:func:`cost_figures`; ``baseline`` is what
:func:`~harness.loadtest.baseline.measure_baseline` measured in the same run (None
without ``baseline``), ``ratio_to_baseline`` the commits/s over its calls/s."""


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank *p*-th percentile of *values* (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def figures(records: Sequence[Mapping[str, Any]], seconds: float) -> dict[str, Any]:
    """Outcome counts, throughput and latency of *records* over *seconds* of load.

    ``retried`` counts submissions rebuilt after a rejection (attempt > 1),
    ``gave_up`` steps whose last submission was rejected, ``latency_ms`` the
    submit round trip of every answered submission (committed or rejected).
    """
    outcomes = Counter(r["outcome"] for r in records)
    last: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in records:
        last[(str(r["thread"]), int(r["step"]))] = r
    answered = [
        float(r["latency_ms"]) for r in records if r["outcome"] in ("committed", "rejected")
    ]
    committed = outcomes["committed"]
    return {
        "steps": len(last),
        "submitted": sum(1 for r in records if r["client_id"] is not None),
        "committed": committed,
        "rebased": sum(1 for r in records if r["outcome"] == "committed" and r["rebased"]),
        "rejected": outcomes["rejected"],
        "retried": sum(1 for r in records if r["client_id"] is not None and r["attempt"] > 1),
        "unknown": outcomes["unknown"],
        "skipped": outcomes["skipped"],
        "gave_up": sum(1 for r in last.values() if r["outcome"] == "rejected"),
        "duplicates": sum(1 for r in records if r["duplicate"]),
        "throughput_tx_s": round(committed / seconds, 1) if seconds > 0 else 0.0,
        "latency_ms": {
            "p50": round(percentile(answered, 50), 2),
            "p99": round(percentile(answered, 99), 2),
            "max": round(max(answered, default=0.0), 2),
        },
    }


def cost_figures(costs: Mapping[str, float | None], committed: int) -> dict[str, Any]:
    """``cpu_ms_per_commit`` of the context actors' processes (None when one is on
    another machine), of the agents and of the agents' event loops (``agents_loop``,
    None when not measured), ``calls_per_commit`` (the agents' remote calls to
    contexts per commit, None when not counted: trajectory replays), and
    ``bookkeeping``: the agents' CPU seconds spent on the load test's own work
    (planning, building transactions, recording), per commit and as a share of the
    agents' CPU, from the *costs* spent over the load."""
    n = max(1, committed)

    def per(value: float | None) -> float | None:
        return None if value is None else round(value * 1000 / n, 3)

    agents = costs.get("agents") or 0.0
    book = costs.get("bookkeeping") or 0.0
    calls = costs.get("calls")
    return {
        "cpu_ms_per_commit": {
            "contexts": per(costs.get("contexts")),
            "agents": per(agents),
            "agents_loop": per(costs.get("agents_loop")),
        },
        "calls_per_commit": round(calls / n, 3) if calls else None,
        "bookkeeping": {
            "seconds": round(book, 3),
            "ms_per_commit": per(book),
            "share_of_agent_cpu": round(book / agents, 3) if agents > 0 else None,
        },
    }


def conflict_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Of one context's records: ``conflicts`` (``conflict`` rejections) and how many were
    ``false_conflicts``: every frame the rejection names was written, by the version
    named, with edits that do not collide with the rejected ones.

    A record's ``intents`` say, per frame, what its transaction meant to change:
    ``append:FIELD`` (add to a list), ``set:FIELD``, or ``*`` (the whole body). Two
    intents on one frame collide when either is ``*`` or they share a field that
    one of them does not only append to. A rejection naming a version no record
    with intents committed (a runtime transaction, another client) is counted true.
    """
    at: dict[int, Mapping[str, Any]] = {}
    for r in records:
        if r.get("outcome") == "committed" and isinstance(r.get("version"), int):
            at[int(r["version"])] = r
    conflicts = false = 0

    def theirs(frame: str, version: int) -> Sequence[str] | None:
        intents = (at.get(version) or {}).get("intents") or {}
        return intents.get(frame)

    for r in records:
        if r.get("outcome") != "rejected" or r.get("error_code") != "conflict":
            continue
        conflicts += 1
        mine = r.get("intents") or {}
        named = r.get("conflicts") or ()
        if named and all(
            _disjoint(
                mine.get(str(c[0])), (at.get(int(c[1])) or {}).get("intents", {}).get(str(c[0]))
            )
            for c in named
        ):
            false += 1
    return {"conflicts": conflicts, "false_conflicts": false}


def _disjoint(a: Sequence[str] | None, b: Sequence[str] | None) -> bool:
    if not a or not b or "*" in a or "*" in b:
        return False
    fields_a = {x.partition(":")[2] for x in a}
    fields_b = {x.partition(":")[2] for x in b}
    return all(f"append:{f}" in a and f"append:{f}" in b for f in fields_a & fields_b)


# --- orchestration -------------------------------------------------------------
