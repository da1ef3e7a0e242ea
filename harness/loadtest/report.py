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
    "kills",
    "kill_log",
    "kill_misses",
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
when the run made a temporary store and removed it."""


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


# --- orchestration -------------------------------------------------------------
