"""The directory's node removed, with Ray's default health checks: how soon a new context is
placed and a lost primary's follower promoted, with a standby directory beside the same
without one, in the same run.

Each run is the scenario ``tests.actors.test_faults:directory_node_lost`` in a child
process on its own 3-node ``ray.cluster_utils.Cluster`` of this machine (Ray's defaults:
a node is declared dead after 5 missed health checks 3 s apart): the directory and a
replicated context's primary on node 1, node 1 removed, then a placement and the
promotion awaited, each timed from the removal (the placement twice: when the directory
recorded its entry, and when the new context's actor served — which includes starting its
process on a loaded machine), then the promoted context's first commit acknowledged (its
replacement follower holds it). ``with standby`` is the default; the
baseline sets ``MORPHZ_DIRECTORY_STANDBY=0`` in the cluster's environment, so only Ray's
restart of the directory (once it declares the node dead) brings placement and promotion
back. Runs alternate between the two. The 1-minute load average is printed beside each
run (the machine is shared). Timings are printed, never asserted.

    .venv/bin/python benchmarks/bench_directory_failover.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import testbed  # first: puts this checkout on sys.path

from tests.actors.multinode import run_scenario

SCENARIO = "tests.actors.test_faults:directory_node_lost"
FIELDS = (
    "placement_recorded_after_s",
    "placed_after_s",
    "promoted_after_s",
    "taken_over_after_s",
    "promotion_decided_after_s",
    "first_write_acknowledged_after_s",
)


def one(standby: bool) -> dict[str, Any]:
    """One run of the scenario (a fresh cluster), with or without the standby."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    env = {} if standby else {"MORPHZ_DIRECTORY_STANDBY": "0"}
    verdict = run_scenario(SCENARIO, env=env)
    return {
        "standby": standby,
        "ok": bool(verdict.get("ok")),
        "error": verdict.get("error"),
        **{k: verdict.get(k) for k in FIELDS},
        # the promotion's record, when the directory that took over made it: its spares,
        # and when its replacement follower held the snapshot (seconds from the decision)
        **{
            k: (verdict.get("failover") or {}).get(k)
            for k in ("spares", "recruited_s", "serving_s", "replacement_serving_s")
        },
        "load_start": round(load, 1),
        "load_end": round(os.getloadavg()[0], 1),
        "run_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        for standby in (True, False):
            run = one(standby)
            runs.append(run)
            if not args.json:
                print(json.dumps(run), flush=True)
    summary: dict[str, Any] = {}
    for standby in (True, False):
        kind = "with_standby" if standby else "without_standby"
        done = [r for r in runs if r["standby"] == standby and r["ok"]]
        summary[kind] = {
            "runs": len(done),
            "failed": sum(1 for r in runs if r["standby"] == standby and not r["ok"]),
            **{
                f"median_{k}": round(statistics.median(r[k] for r in done), 2)
                for k in ("placement_recorded_after_s", "placed_after_s", "promoted_after_s")
                if done
            },
            "placement_recorded_after_s": [r["placement_recorded_after_s"] for r in done],
            "placed_after_s": [r["placed_after_s"] for r in done],
            "promoted_after_s": [r["promoted_after_s"] for r in done],
            "load": [(r["load_start"], r["load_end"]) for r in done],
        }
    machine = testbed.machine(testbed.scratch_parent())
    print(testbed.describe(machine))
    print(json.dumps({"runs": runs if args.json else len(runs), "summary": summary}))


if __name__ == "__main__":
    main()
