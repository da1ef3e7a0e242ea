"""What a finished load test reports: each context's history checked, and the document.

:func:`run_report` is the last phase of a run (:mod:`harness.loadtest.run`): it checks
every context's log and acknowledged commits against what the agents recorded, adds
up the figures (:mod:`harness.loadtest.report`) and writes the report document whose
keys ``morphz loadtest`` prints (docs/loadtest.md).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Protocol

from actors.client.handle import ContextHandle
from harness.loadtest.checks import check_after_run, submissions_of
from harness.loadtest.cluster import Killer, local_nodes
from harness.loadtest.nemeses import Nemesis
from harness.loadtest.nodes import NodeKiller
from harness.loadtest.options import LoadtestOptions, Tamper
from harness.loadtest.report import (
    MAX_VIOLATIONS,
    REPORT_KEYS,
    conflict_counts,
    cost_figures,
    figures,
)

__all__ = ["RunFacts", "run_report"]


class RunFacts(Protocol):
    """What the report needs of a run: its options, id, store, contexts (handles and the
    nodes they run on), the tampering a test asked for, and whether it was interrupted."""

    opts: LoadtestOptions
    run_id: str
    store: str
    handles: list[ContextHandle]
    nodes: list[str]
    tamper: Tamper | None
    interrupted: bool


def run_report(
    run: RunFacts,
    by_context: dict[int, list[dict[str, Any]]],
    elapsed: float,
    killer: Killer | NodeKiller | Nemesis | None,
    n_agents: int,
    costs: dict[str, float | None],
    baseline: dict[str, Any] | None,
) -> dict[str, Any]:
    """The report of a finished run: each context's history checked
    (:func:`~harness.loadtest.checks.check_after_run`, on its store when this node holds
    it), the figures of every context and of all together, and the run's facts, under
    :data:`~harness.loadtest.report.REPORT_KEYS` in order."""
    opts = run.opts
    violations: list[dict[str, str]] = []
    per_context = []
    collisions: Counter[str] = Counter()
    checked = {"submissions": 0, "log_records": 0, "replayed": 0, "acknowledged_on_disk": 0}
    local = set(local_nodes())
    all_records: list[dict[str, Any]] = []
    kills_by = Counter(k["context"] for k in (killer.kills if killer else []))
    for c, handle in enumerate(run.handles):
        records = by_context.get(c, [])
        all_records.extend(records)
        if run.tamper is not None:
            records = run.tamper(handle.name, list(records))
        path = os.path.join(run.store, handle.name)
        on_disk = run.nodes[c] in local and os.path.isdir(path)
        result = check_after_run(handle, records, path if on_disk else None)
        found = result.violations
        checked["log_records"] += result.log_records
        checked["acknowledged_on_disk"] += result.on_disk
        checked["submissions"] += len(submissions_of(records))
        checked["replayed"] += result.replayed
        violations.extend(
            {"context": handle.name, "kind": v.kind, "detail": v.detail} for v in found
        )
        fig = figures(by_context.get(c, []), elapsed)
        conflicted = conflict_counts(by_context.get(c, []))
        for key, value in conflicted.items():
            collisions[key] += value
        per_context.append(
            {
                "name": handle.name,
                "node_id": run.nodes[c],
                "version": result.version,
                "committed": fig["committed"],
                "rebased": fig["rebased"],
                "rejected": fig["rejected"],
                "retried": fig["retried"],
                "unknown": fig["unknown"],
                "throughput_tx_s": fig["throughput_tx_s"],
                "latency_ms": fig["latency_ms"],
                "kills": kills_by[handle.name],
                "batches": result.stats.get("batches"),
                "largest_batch": result.stats.get("largest_batch"),
                "writes": result.stats.get("writes"),
                "joined": result.stats.get("joined"),
                "history_ok": not found,
                "violations": len(found),
                "replayed": result.replayed,
                **conflicted,
            }
        )
    total = figures(all_records, elapsed)
    commits = max(1, total["committed"])
    contention = {
        "shared_mode": opts.shared_mode,
        "conflicts": collisions["conflicts"],
        "false_conflicts": collisions["false_conflicts"],
        "rejections_per_1000_commits": round(total["rejected"] * 1000 / commits, 2),
        "false_conflicts_per_1000_commits": round(
            collisions["false_conflicts"] * 1000 / commits, 2
        ),
    }
    requested: dict[str, Any] = (
        {"duration_s": opts.duration_s}
        if opts.duration_s is not None
        else {"transactions": opts.transactions}
    )
    if opts.kill_every_s is not None:
        requested["kill_every_s"] = opts.kill_every_s
    if opts.followers:
        requested["followers"] = opts.followers
    if opts.kill_node_every_s is not None:
        requested["kill_node_every_s"] = opts.kill_node_every_s
        requested["nodes"] = opts.nodes
    if opts.nemesis is not None:
        requested["nemesis"] = opts.nemesis.model_dump()
        requested["nodes"] = opts.nodes
    if opts.workload == "trajectories":
        requested["conversations"] = opts.conversations
    doc: dict[str, Any] = {
        "run_id": run.run_id,
        "workload": opts.workload,
        "threads": opts.threads,
        "contexts": opts.contexts,
        "agents": n_agents,
        "pipeline": opts.pipeline,
        "conflict_rate": opts.conflict_rate,
        "shared_frames": opts.shared_frames,
        "seed": opts.seed,
        "requested": requested,
        "duration_s": round(elapsed, 3),
        **total,
        **cost_figures(costs, total["committed"]),
        "baseline": baseline,
        "ratio_to_baseline": (
            None
            if baseline is None or not baseline["calls_s"]
            else round(total["throughput_tx_s"] / baseline["calls_s"], 3)
        ),
        "kills": 0 if killer is None else len(killer.kills),
        "kill_log": [] if killer is None else killer.kills,
        "kill_misses": {
            "skipped": 0 if killer is None else killer.skipped,
            "errors": 0 if killer is None else killer.errors,
        },
        "contention": contention,
        "history_ok": not violations,
        "violations": violations[:MAX_VIOLATIONS],
        "violation_count": len(violations),
        "checked": checked,
        "per_context": per_context,
        "store": run.store,
        "store_kept": True,
        "namespace": opts.namespace,
        "interrupted": run.interrupted,
    }
    assert tuple(doc) == REPORT_KEYS
    return doc
