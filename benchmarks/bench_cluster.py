"""Contexts spread over nodes: 4 contexts on 4 nodes ÷ 1 context on 1 node, in one run.

A ``ray.cluster_utils.Cluster`` of 4 nodes on this machine (one CPU each, each
node with its own store root, ``MORPHZ_STORE``), contexts placed through the
context directory (``actors.cluster.placing.place``):

* **baseline**: 1 context on 1 node, driven by one loader actor on the same
  node (``--threads`` logical threads, asyncio tasks, each submitting durable
  commits one after the other through a ``ContextHandle``);
* **measured**: 4 contexts placed ``spread`` (one per node), each driven by
  its own loader on its node with the same number of threads, all at once.

Both are run in interleaved rounds (baseline, measured, baseline, …) so drift
in the machine's load hits both. Printed for each: commits/s, p50/p99 commit
latency, and CPU seconds per commit — of the context actors, of the loaders,
and of the whole machine (``/proc/stat``: everything, Ray's raylets and GCS
and any other load on the machine included) — then the ratio measured ÷
baseline. The machine's cores bound the ratio: the CPU split says where the
time goes. Timings are printed, never asserted.

    .venv/bin/python benchmarks/bench_cluster.py [--quick] [--json] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.client.lookup import lookup
from actors.client.nodes import pinned
from actors.cluster.directory_handle import directory
from actors.cluster.placing import place
from harness.loadtest import percentile
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive, Revise

NAMESPACE = "morphz-bench-cluster"
NODES = 4
TICKS = os.sysconf("SC_CLK_TCK")


def _tx(frame: str, exists: bool, base: int, i: int) -> ContextTx:
    body = ((Symbol("step"), i), (Symbol("status"), Symbol("tests-passed")))
    op = Revise(id=frame, body=body) if exists else Derive(id=frame, body=body)
    return ContextTx(base_version=base, reason="bench", ops=(op,))


class Loader:
    """Drives one context from one actor process: logical threads are asyncio tasks."""

    def pid(self) -> int:
        return os.getpid()

    async def commits(self, name: str, threads: int, seconds: float, tag: str) -> dict[str, Any]:
        """*threads* sequential committers on context *name* for *seconds*."""
        handle = lookup(name, NAMESPACE)
        latencies: list[float] = []
        done = 0
        deadline = time.perf_counter() + seconds

        async def thread(k: int) -> None:
            nonlocal done
            frame, exists, base, i = f"{tag}/t{k}", False, await handle.version_async(), 0
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                receipt = await handle.submit_async(_tx(frame, exists, base, i))
                latencies.append((time.perf_counter() - t) * 1000)
                i += 1
                if receipt.committed:
                    exists, base, done = True, receipt.version, done + 1
                else:
                    base = await handle.version_async()

        started = time.perf_counter()
        await asyncio.gather(*(thread(k) for k in range(threads)))
        return {
            "count": done,
            "seconds": time.perf_counter() - started,
            "latencies": latencies,
        }


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) *pid* has used."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (every process; not idle or iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / TICKS


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray
        from ray.cluster_utils import Cluster

        self.args = args
        self.seconds = args.seconds or (2.0 if args.quick else 5.0)
        self.rounds = args.rounds or (1 if args.quick else 3)
        self.dir = tempfile.mkdtemp(prefix="morphz-bench-cluster-", dir=args.dir)
        self.report: dict[str, Any] = {"machine": testbed.machine(self.dir)}

        def node_args(i: int) -> dict[str, Any]:
            root = os.path.join(self.dir, f"node-{i}")
            os.makedirs(root)
            return {"num_cpus": 1, "env_vars": {"MORPHZ_STORE": root}}

        self.cluster: Any = Cluster(
            initialize_head=True, head_node_args={"include_dashboard": False, **node_args(0)}
        )
        head: Any = self.cluster.head_node
        self.node_ids = [str(head.node_id)]
        for i in range(1, NODES):
            self.node_ids.append(str(self.cluster.add_node(**node_args(i)).node_id))
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False, namespace=NAMESPACE)
        self.loaders: dict[str, Any] = {}
        self.contexts: list[ContextHandle] = []
        self.names: list[str] = []

    def say(self, text: str = "") -> None:
        if not self.args.json:
            print(text, flush=True)

    def loader(self, node: str) -> Any:
        import ray

        if node not in self.loaders:
            self.loaders[node] = (
                ray.remote(Loader)
                .options(num_cpus=0, max_concurrency=1000, scheduling_strategy=pinned(node))
                .remote()
            )
        return self.loaders[node]

    def place(self, count: int, policy: str) -> list[tuple[str, str]]:
        """*count* new contexts placed by *policy*: (name, node id) each."""
        out = []
        for _ in range(count):
            name = f"bc-{uuid.uuid4().hex[:8]}"
            self.contexts.append(place(name, placement=policy, namespace=NAMESPACE, lifetime=None))
            self.names.append(name)
            out.append((name, directory(NAMESPACE).get(name).primary.node_id))
        return out

    def run(self, placed: list[tuple[str, str]], tag: str) -> dict[str, Any]:
        """Drive every context of *placed* at once from a loader on its node."""
        import ray

        handles = {h.name: h for h in self.contexts}
        ctx_pids = [int(handles[name].describe()["pid"]) for name, _ in placed]
        loaders = [self.loader(node) for _, node in placed]
        loader_pids = [int(ray.get(ld.pid.remote())) for ld in loaders]
        for (name, _), ld in zip(placed, loaders, strict=True):  # warm up
            ray.get(ld.commits.remote(name, 2, 0.2, f"warm-{tag}"))
        before = (
            sum(cpu_of(p) for p in ctx_pids),
            sum(cpu_of(p) for p in loader_pids),
            machine_cpu(),
        )
        refs = [
            ld.commits.remote(name, self.args.threads, self.seconds, tag)
            for (name, _), ld in zip(placed, loaders, strict=True)
        ]
        results = ray.get(refs)
        after = (
            sum(cpu_of(p) for p in ctx_pids),
            sum(cpu_of(p) for p in loader_pids),
            machine_cpu(),
        )
        count = sum(r["count"] for r in results)
        seconds = max(r["seconds"] for r in results)
        latencies = [x for r in results for x in r["latencies"]]
        per = 1e6 / max(1, count)
        return {
            "contexts": len(placed),
            "nodes": len({node for _, node in placed}),
            "commits": count,
            "rate": count / seconds,
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
            "cpu_us_per_commit": {
                "context_actors": (after[0] - before[0]) * per,
                "loaders": (after[1] - before[1]) * per,
                "machine": (after[2] - before[2]) * per,
            },
            "machine_busy_cores": (after[2] - before[2]) / seconds,
        }

    def main(self) -> None:
        self.say(
            f"{NODES}-node cluster on one machine ({os.cpu_count()} cores, 1-min load "
            f"{os.getloadavg()[0]:.2f}); {self.args.threads} threads per context, "
            f"{self.seconds:g} s per run, {self.rounds} rounds"
        )
        four = self.place(NODES, "spread")  # first: an empty cluster spreads one per node
        one = self.place(1, f"node:{self.node_ids[0]}")
        assert len({node for _, node in four}) == NODES, four
        runs: dict[str, list[dict[str, Any]]] = {"one": [], "four": []}
        for r in range(self.rounds):
            runs["one"].append(self.run(one, f"one{r}"))
            runs["four"].append(self.run(four, f"four{r}"))

        def median(kind: str, key: str, sub: str | None = None) -> float:
            values = sorted((x[key] if sub is None else x[key][sub]) for x in runs[kind])
            return float(values[len(values) // 2])

        table: dict[str, dict[str, Any]] = {}
        for kind in ("one", "four"):
            table[kind] = {
                "rate": round(median(kind, "rate"), 1),
                "p50_ms": round(median(kind, "p50_ms"), 2),
                "p99_ms": round(median(kind, "p99_ms"), 2),
                "cpu_us_per_commit": {
                    k: round(median(kind, "cpu_us_per_commit", k), 1)
                    for k in ("context_actors", "loaders", "machine")
                },
                "machine_busy_cores": round(median(kind, "machine_busy_cores"), 2),
            }
        ratio = table["four"]["rate"] / table["one"]["rate"] if table["one"]["rate"] else 0.0
        self.report.update(
            {
                "threads_per_context": self.args.threads,
                "seconds": self.seconds,
                "rounds": self.rounds,
                "one_context_one_node": table["one"],
                "four_contexts_four_nodes": table["four"],
                "ratio_four_over_one": round(ratio, 2),
                "runs": runs,
                "load_avg_1m_after": round(os.getloadavg()[0], 2),
            }
        )
        if self.args.json:
            print(json.dumps(self.report))
            return
        self.say()
        header = f"{'':24} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8}"
        header += f" {'CPU µs/commit: ctx':>19} {'loader':>7} {'machine':>8} {'busy cores':>10}"
        self.say(header)
        for label, kind in (("1 context, 1 node", "one"), ("4 contexts, 4 nodes", "four")):
            t = table[kind]
            c = t["cpu_us_per_commit"]
            self.say(
                f"{label:24} {t['rate']:>10.1f} {t['p50_ms']:>8.2f} {t['p99_ms']:>8.2f}"
                f" {c['context_actors']:>19.1f} {c['loaders']:>7.1f} {c['machine']:>8.1f}"
                f" {t['machine_busy_cores']:>10.2f}"
            )
        self.say(f"\nratio 4 contexts on 4 nodes ÷ 1 context on 1 node: {ratio:.2f}×")
        self.say(f"1-min load after: {os.getloadavg()[0]:.2f}")

    def close(self) -> None:
        import ray

        for h in self.contexts:
            try:
                h.shutdown()
            except Exception:  # already gone
                pass
        d = directory(NAMESPACE)
        for name in self.names:
            d.remove(name)
        ray.shutdown()
        self.cluster.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round")
    parser.add_argument("--json", action="store_true", help="one JSON document of figures")
    parser.add_argument("--threads", type=int, default=8, help="logical threads per context")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--dir", default=testbed.scratch_parent(), help="scratch directory")
    args = parser.parse_args(argv)
    bench = Bench(args)
    try:
        bench.main()
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
