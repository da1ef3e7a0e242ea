"""Replicated contexts: commit throughput and latency by replication factor, and failover time.

Measured in one run, on one ``ray.cluster_utils.Cluster`` of 3 nodes on this
machine (each node its own store root, as separate disks would be):

(a) **commits by replication factor** — one context with 0 (the baseline), 1
    and 2 followers, each placed with its primary on the same node; N
    concurrent submitters (asyncio tasks of this driver, each deriving its
    own frames, so nothing conflicts and group commit works as it does under
    load) for D seconds: commits/s, p50 and p99 latency, and the ratio to
    factor 0. Rounds interleave the factors so load drift hits all of them.
(b) **failover** — a context with 1 follower; repeatedly: commit, remove the
    primary's node (as a lost machine goes), and time until the first
    commit acknowledged by the new primary (driver's view: the same handle,
    which follows the promotion by itself); the node is added back before the
    next kill. p50 and each kill's time.

Every commit is durable (fsync) on the primary and on ``acks`` followers
before it is acknowledged. Timings are printed, never asserted. On a shared
machine the figures move with the load: the 1-minute load average is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import testbed  # first: puts this checkout on sys.path

NAMESPACE = "morphz-bench-replication"
FACTORS = (0, 1, 2)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, root: str) -> None:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        from harness.loadtest.nodes import TestCluster

        self.cluster = TestCluster(root, 3, NAMESPACE)
        self.ids = [str(n.node_id) for n in self.cluster.nodes]

    def close(self) -> None:
        self.cluster.shutdown()

    async def _load(self, handle: Any, name: str, writers: int, seconds: float) -> dict[str, Any]:
        latencies: list[float] = []
        stop = time.monotonic() + seconds
        self.runs = getattr(self, "runs", 0) + 1
        run = self.runs

        async def writer(w: int) -> None:
            i = 0
            while time.monotonic() < stop:
                tx = f"(context-tx (base-version 0) (derive r{run}w{w}/f{i} (n {i})))"
                t = time.perf_counter()
                receipt = await handle.submit_async(tx)
                latencies.append(time.perf_counter() - t)
                assert receipt.committed, receipt
                i += 1

        started = time.monotonic()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        elapsed = time.monotonic() - started
        return {
            "commits": len(latencies),
            "commits_s": len(latencies) / elapsed,
            "p50_ms": _percentile(latencies, 0.50) * 1e3,
            "p99_ms": _percentile(latencies, 0.99) * 1e3,
        }

    def factors(self, writers: int, seconds: float, rounds: int) -> dict[str, Any]:
        from actors.cluster.placing import place

        handles = {
            f: place(
                f"bench-r{f}",
                followers=f,
                placement=f"node:{self.ids[1]}",
                namespace=NAMESPACE,
                lifetime=None,
            )
            for f in FACTORS
        }
        for f, h in handles.items():  # warm up: actors started, followers synced
            asyncio.run(self._load(h, f"bench-r{f}", 2, 0.5))
        runs: dict[int, list[dict[str, Any]]] = {f: [] for f in FACTORS}
        for _ in range(rounds):
            for f, h in handles.items():
                runs[f].append(asyncio.run(self._load(h, f"bench-r{f}", writers, seconds)))
        out: dict[str, Any] = {}
        for f in FACTORS:
            rs = runs[f]
            out[str(f)] = {
                "commits_s": statistics.median(r["commits_s"] for r in rs),
                "p50_ms": statistics.median(r["p50_ms"] for r in rs),
                "p99_ms": statistics.median(r["p99_ms"] for r in rs),
                "commits": sum(r["commits"] for r in rs),
            }
        base = out["0"]["commits_s"]
        for f in FACTORS:
            out[str(f)]["vs_factor_0"] = out[str(f)]["commits_s"] / base if base else None
        return out

    def failover(self, kills: int) -> dict[str, Any]:
        from actors.cluster.directory_handle import directory
        from actors.cluster.placing import place
        from protocol.errors import MorphzError

        times: list[float] = []
        for k in range(kills):
            name = f"bench-fo{k}"
            victim = 1 + k % 2
            handle = place(
                name, followers=1, placement=f"node:{self.ids[victim]}", namespace=NAMESPACE
            )
            for i in range(5):
                assert handle.submit(
                    f"(context-tx (base-version 0) (derive d/{i} (i {i})))"
                ).committed
            first = directory(NAMESPACE).get(name).primary.actor
            removed = time.monotonic()
            self.cluster.remove(victim)
            i = 0
            while True:
                try:
                    receipt = handle.submit(
                        f"(context-tx (base-version 0) (derive after/{i} (i {i})))",
                        client_id=f"{name}-after-{i}",
                        timeout=10,
                    )
                except MorphzError:
                    continue
                assert receipt.committed
                if handle.transport.actor_name != first:
                    break
                i += 1
            times.append(time.monotonic() - removed)
            self.ids[victim] = self.cluster.add(victim)
            handle.shutdown()
            directory(NAMESPACE).remove(name)  # no longer supervised: no later promotion
        return {
            "p50_s": statistics.median(times),
            "each_s": [round(t, 2) for t in times],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--json", action="store_true", help="one JSON document of figures")
    parser.add_argument("--dir", default=None, help="where the nodes' store roots go")
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--kills", type=int, default=None, help="failover kills (default 5)")
    parser.add_argument("--failover-only", action="store_true", help="skip (a)")
    args = parser.parse_args(argv)
    seconds, rounds, kills = (2.0, 1, 3) if args.quick else (5.0, 3, 5)
    kills = args.kills or kills
    root = tempfile.mkdtemp(
        prefix="morphz-bench-replication-", dir=args.dir or testbed.scratch_parent()
    )
    bench = Bench(root)
    try:
        doc = {
            "load_1min": os.getloadavg()[0],
            "cpus": os.cpu_count(),
            "writers": args.writers,
            "seconds_per_run": seconds,
            "rounds": rounds,
            "factors": {} if args.failover_only else bench.factors(args.writers, seconds, rounds),
            "failover": bench.failover(kills),
        }
    finally:
        bench.close()
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"load average (1 min): {doc['load_1min']:.2f} on {doc['cpus']} CPUs")
    print(f"(a) {args.writers} concurrent writers, {seconds:g} s x {rounds} rounds, medians:")
    for f, r in doc["factors"].items():
        print(
            f"  factor {f}: {r['commits_s']:8.1f} commits/s  p50 {r['p50_ms']:7.2f} ms"
            f"  p99 {r['p99_ms']:7.2f} ms  x{r['vs_factor_0']:.2f} of factor 0"
        )
    fo = doc["failover"]
    print(f"(b) failover, node removal -> first commit by the new primary: p50 {fo['p50_s']:.2f} s")
    print(f"    each: {fo['each_s']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
