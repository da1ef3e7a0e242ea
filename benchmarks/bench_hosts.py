"""Context hosts: memory per context, activation latency, throughput against a process each.

One local Ray cluster on this machine, every figure beside its baseline from the
same run:

* **memory**: one host's resident memory (``/proc``) at its start, with
  ``--contexts`` contexts active (each created, one commit), and after all of
  them were deactivated (idle: the host only remembers them) — per context
  beyond the host's base — beside the resident memory of one context actor
  process of today's design (``connect``), measured in the same run;
* **activation**: a ``version()`` call on each idle context (activation + call),
  p50/p99, beside a bare Ray actor call (the host's no-op ``ping``) and the same
  call on an active context; and the start of a context in its own process
  (``connect``, today's activation) for a few contexts;
* **throughput**: ``--active`` contexts spread over 4 hosts against the same
  number of contexts each in its own actor process, the same loader
  (``--threads`` sequential committers per context, asyncio tasks in 2 loader
  actors), interleaved rounds; commits/s, p50/p99 and the machine's busy cores;
* **directory**: placements per second through ``place_hosted`` and entry
  lookups per second, for the capacity model (docs/cluster.md).

    .venv/bin/python benchmarks/bench_hosts.py [--quick] [--json] [--contexts N]
        [--active N] [--threads N] [--seconds S]

Timings are printed, never asserted.
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
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.cluster.directory_handle import directory
from actors.server.connect import connect
from actors.server.hosting import HostHandle, start_host
from harness.loadtest import percentile
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive, Revise

NAMESPACE = "morphz-bench-hosts"
HOSTS = 4
TICKS = os.sysconf("SC_CLK_TCK")


def rss_of(pid: int) -> int:
    """Resident bytes of process *pid*."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / TICKS


def _tx(frame: str, exists: bool, base: int, i: int) -> ContextTx:
    body = ((Symbol("step"), i), (Symbol("status"), Symbol("ok")))
    op = Revise(id=frame, body=body) if exists else Derive(id=frame, body=body)
    return ContextTx(base_version=base, reason="bench", ops=(op,))


def q(values: list[float], p: float) -> float:
    return round(percentile(values, p), 2)


class Loader:
    """Drives many contexts from one actor process; each committer is an asyncio task."""

    async def commits(
        self, handles: list[ContextHandle], threads: int, seconds: float, tag: str
    ) -> dict[str, Any]:
        latencies: list[float] = []
        done = 0
        deadline = time.perf_counter() + seconds

        async def thread(h: ContextHandle, k: int) -> None:
            nonlocal done
            frame, exists, base, i = f"{tag}/t{k}", False, await h.version_async(), 0
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                receipt = await h.submit_async(_tx(frame, exists, base, i))
                latencies.append((time.perf_counter() - t) * 1000)
                i += 1
                if receipt.committed:
                    exists, base, done = True, receipt.version, done + 1
                else:
                    base = await h.version_async()

        started = time.perf_counter()
        await asyncio.gather(*(thread(h, k) for h in handles for k in range(threads)))
        return {"count": done, "seconds": time.perf_counter() - started, "latencies": latencies}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import ray

        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="morphz-bench-hosts-", dir=args.dir)
        self.report: dict[str, Any] = {"machine": testbed.machine(self.dir)}
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            namespace=NAMESPACE,
        )
        directory(NAMESPACE)  # first: hosts report to it from their first tick
        self.hosts: list[HostHandle] = []
        self.alone: list[ContextHandle] = []

    def say(self, text: str = "") -> None:
        if not self.args.json:
            print(text, flush=True)

    def host(self, name: str) -> HostHandle:
        h = start_host(name, store_dir=os.path.join(self.dir, "hosted"), namespace=NAMESPACE)
        self.hosts.append(h)
        return h

    # -- memory and activation ---------------------------------------------------------

    def memory_and_activation(self) -> None:
        import ray

        n = self.args.contexts
        h = self.host("m0")
        pid = int(h.load()["pid"])
        base = rss_of(pid)
        handles = []
        for i in range(n):
            c = h.context(f"m-{i}")
            c.submit(_tx("note", False, 0, i))
            handles.append(c)
        active = rss_of(pid)
        for i in range(n):
            h.deactivate(f"m-{i}")
        idle = rss_of(pid)
        # a bare Ray actor call and a call on an active context, then activations
        ping = []
        for _ in range(200):
            t = time.perf_counter()
            ray.get(h.actor.ping.remote())
            ping.append((time.perf_counter() - t) * 1000)
        warm_h = handles[0]
        warm_h.version()
        warm = []
        for _ in range(200):
            t = time.perf_counter()
            warm_h.version()
            warm.append((time.perf_counter() - t) * 1000)
        h.deactivate("m-0")
        activation = []
        for c in handles:
            t = time.perf_counter()
            c.version()
            activation.append((time.perf_counter() - t) * 1000)
        host_side = h.load()
        # today's design: one context, one actor process
        starts = []
        alone_rss = []
        for i in range(self.args.alone_starts):
            t = time.perf_counter()
            a = connect(
                f"alone-{i}", store_dir=os.path.join(self.dir, "alone"), namespace=NAMESPACE
            )
            a.submit(_tx("note", False, 0, i))
            starts.append((time.perf_counter() - t) * 1000)
            alone_rss.append(rss_of(int(a.pid())))
            self.alone.append(a)
        mb = 1 << 20
        self.report["memory"] = {
            "contexts": n,
            "host_base_mb": round(base / mb, 1),
            "host_all_active_mb": round(active / mb, 1),
            "host_all_idle_mb": round(idle / mb, 1),
            "per_active_context_mb": round((active - base) / n / mb, 3),
            "per_idle_context_mb": round((idle - base) / n / mb, 3),
            "one_context_process_mb": round(sum(alone_rss) / len(alone_rss) / mb, 1),
        }
        self.report["activation"] = {
            "bare_ray_call_ms": {"p50": q(ping, 50), "p99": q(ping, 99)},
            "active_context_call_ms": {"p50": q(warm, 50), "p99": q(warm, 99)},
            "idle_context_call_ms": {"p50": q(activation, 50), "p99": q(activation, 99)},
            "host_side_activation_ms": {
                "p50": round(host_side["activation_p50_ms"], 2),
                "p99": round(host_side["activation_p99_ms"], 2),
            },
            "context_process_start_ms": {"p50": q(starts, 50), "p99": q(starts, 99)},
            "activations": host_side["activations"],
            "deactivations": host_side["deactivations"],
        }
        h.shutdown()
        self.hosts.remove(h)

    # -- throughput ----------------------------------------------------------------

    def run(self, loaders: list[Any], handles: list[ContextHandle], tag: str) -> dict[str, Any]:
        import ray

        halves = [handles[k :: len(loaders)] for k in range(len(loaders))]
        ray.get(
            [
                ld.commits.remote(hs, 1, 0.3, f"warm-{tag}")
                for ld, hs in zip(loaders, halves, strict=True)
            ]
        )
        before = machine_cpu()
        refs = [
            ld.commits.remote(hs, self.args.threads, self.args.seconds, tag)
            for ld, hs in zip(loaders, halves, strict=True)
        ]
        results = ray.get(refs)
        busy = machine_cpu() - before
        count = sum(r["count"] for r in results)
        seconds = max(r["seconds"] for r in results)
        lat = [x for r in results for x in r["latencies"]]
        return {
            "rate": round(count / seconds, 1),
            "p50_ms": q(lat, 50),
            "p99_ms": q(lat, 99),
            "busy_cores": round(busy / seconds, 2),
        }

    def throughput(self) -> None:
        import ray

        n = self.args.active
        hosts = [self.host(f"t{i}") for i in range(HOSTS)]
        hosted = [hosts[i % HOSTS].context(f"t-{i}") for i in range(n)]
        alone_n = min(n, self.args.max_processes)
        alone = [
            connect(f"p-{i}", store_dir=os.path.join(self.dir, "alone"), namespace=NAMESPACE)
            for i in range(alone_n)
        ]
        self.alone.extend(alone)
        loaders = [
            ray.remote(Loader).options(num_cpus=0, max_concurrency=10_000).remote()
            for _ in range(2)
        ]
        runs: dict[str, list[dict[str, Any]]] = {"hosted": [], "hosted_same_n": [], "alone": []}
        for r in range(self.args.rounds):
            runs["alone"].append(self.run(loaders, alone, f"a{r}"))
            runs["hosted_same_n"].append(self.run(loaders, hosted[:alone_n], f"s{r}"))
            if alone_n < n:
                runs["hosted"].append(self.run(loaders, hosted, f"h{r}"))

        def median(kind: str, key: str) -> float:
            values = sorted(x[key] for x in runs[kind])
            return float(values[len(values) // 2]) if values else 0.0

        table = {
            kind: {k: median(kind, k) for k in ("rate", "p50_ms", "p99_ms", "busy_cores")}
            for kind in runs
            if runs[kind]
        }
        self.report["throughput"] = {
            "active_contexts": n,
            "hosts": HOSTS,
            "separate_processes": alone_n,
            "threads_per_context": self.args.threads,
            "seconds": self.args.seconds,
            "rounds": self.args.rounds,
            **table,
            "ratio_hosted_over_alone_same_n": round(
                table["hosted_same_n"]["rate"] / max(1e-9, table["alone"]["rate"]), 2
            ),
        }

    # -- the directory -----------------------------------------------------------------

    def directory_load(self) -> None:
        d = directory(NAMESPACE)
        deadline = time.monotonic() + 15
        while not d.hosts() and time.monotonic() < deadline:
            time.sleep(0.2)
        k = self.args.placements
        t = time.perf_counter()
        for i in range(k):
            d.place_hosted(f"d-{i}")
        placing = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(k):
            d.get(f"d-{i}")
        looking = time.perf_counter() - t
        self.report["directory"] = {
            "placements": k,
            "placements_per_s": round(k / placing, 1),
            "lookups_per_s": round(k / looking, 1),
            "hosts_reporting": len(d.hosts()),
        }
        for i in range(k):
            d.remove(f"d-{i}")

    def main(self) -> None:
        self.say(
            f"{os.cpu_count()} cores, 1-min load {os.getloadavg()[0]:.2f}; "
            f"{self.args.contexts} contexts for memory/activation, {self.args.active} active "
            f"for throughput ({self.args.threads} committers each, {self.args.seconds:g} s, "
            f"{self.args.rounds} rounds)"
        )
        self.memory_and_activation()
        self.throughput()
        self.directory_load()
        self.report["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
        if self.args.json:
            print(json.dumps(self.report))
            return
        for part in ("memory", "activation", "throughput", "directory"):
            self.say(f"\n{part}:")
            for key, value in self.report[part].items():
                self.say(f"  {key}: {value}")
        self.say(f"\n1-min load after: {self.report['load_avg_1m_after']}")

    def close(self) -> None:
        import ray

        for a in self.alone:
            try:
                a.shutdown()
            except Exception:  # already gone
                pass
        for h in self.hosts:
            try:
                h.shutdown()
            except Exception:
                pass
        ray.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one short round")
    parser.add_argument("--json", action="store_true", help="one JSON document of figures")
    parser.add_argument("--contexts", type=int, default=None, help="contexts for memory")
    parser.add_argument("--active", type=int, default=None, help="active contexts, throughput")
    parser.add_argument(
        "--max-processes",
        type=int,
        default=32,
        help="most separate context processes started (each ~100 MB resident)",
    )
    parser.add_argument("--alone-starts", type=int, default=5, help="process starts timed")
    parser.add_argument("--threads", type=int, default=1, help="committers per context")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--placements", type=int, default=None, help="directory placements")
    parser.add_argument("--dir", default=testbed.scratch_parent(), help="scratch directory")
    args = parser.parse_args(argv)
    args.contexts = args.contexts or (200 if args.quick else 1000)
    args.active = args.active or (32 if args.quick else 100)
    args.seconds = args.seconds or (3.0 if args.quick else 5.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.placements = args.placements or (200 if args.quick else 1000)
    bench = Bench(args)
    try:
        bench.main()
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
