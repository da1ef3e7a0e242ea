"""Durable commits through context actors on Ray, beside the transport's own limit.

Measured in one run, on one Ray cluster (a new local one unless ``--address``):

(a) **transport baseline**: pipelined no-op calls (256 in flight at any time) to
    a bare async Ray actor with the context actor's options (``max_concurrency``
    1000, no CPU, pinned to the same node), carrying a transaction-sized
    payload; and the same no-op calls made by N sequential callers;
(b) **commit throughput**: N logical threads (1 … 32, asyncio tasks in one
    loader actor, as agent threads are) each submitting durable commits through
    :class:`actors.client.handle.ContextHandle` to one context actor, one after the
    other (each revises the thread's own frame, based on its last receipt, so
    everything is rebased and nothing conflicts); commits/s, p50/p99 latency,
    mean group-commit size, and the ratio to (a);
(c) **latency at half of peak**: an open-loop arrival at half the best rate of
    (b), each submission deriving a new frame; latency from its scheduled time;
(d) **1, 2, 4 contexts** sharing the same total number of threads;
(e) **conflict rate** 0, 10, 25, 50 %: ``morphz loadtest`` runs
    (:func:`harness.loadtest.run_loadtest`, 8 threads, one shared frame; each
    step reads before it writes, so rates are below (b)); every history is
    checked;
(f) **memory** (``--memory N``): N commits through one context actor by 16
    threads, its resident set sampled every 10 % (psutil if installed, else
    ``VmRSS`` of ``/proc/<pid>/status``).

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from actors.client.nodes import current_node_id, pinned
from actors.server.connect import connect
from harness.loadtest import percentile, run_loadtest
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive, Revise
from protocol.txwire import tx_to_msgpack

NAMESPACE = "morphz-bench"
LEVELS = (1, 2, 4, 8, 16, 32)
CONFLICT_RATES = (0.0, 0.10, 0.25, 0.50)
CONTEXT_COUNTS = (1, 2, 4)
PIPELINE_WINDOW = 256
"""No-op calls in flight at once in the pipelined baseline (Ray warns past 5000 queued)."""


def _tx(frame: str, exists: bool, base: int, i: int) -> ContextTx:
    body = ((Symbol("step"), i), (Symbol("status"), Symbol("tests-passed")))
    op = Revise(id=frame, body=body) if exists else Derive(id=frame, body=body)
    return ContextTx(base_version=base, reason="bench", ops=(op,))


def _summary(latencies: list[float], count: int, seconds: float) -> dict[str, Any]:
    return {
        "count": count,
        "seconds": round(seconds, 3),
        "rate": round(count / seconds, 1) if seconds > 0 else 0.0,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


class Echo:
    """The bare actor of the transport baseline: answers nothing, at once."""

    async def noop(self, payload: bytes) -> bytes:
        return b""


class Loader:
    """Drives the load from one actor process: logical threads are asyncio tasks."""

    def __init__(self) -> None:
        self._handles: dict[str, ContextHandle] = {}

    def _handle(self, name: str) -> ContextHandle:
        if name not in self._handles:
            self._handles[name] = lookup(name, NAMESPACE)
        return self._handles[name]

    async def noop_pipelined(
        self, echo: Any, n: int, payload: bytes, window: int = PIPELINE_WINDOW
    ) -> dict[str, Any]:
        """*n* no-op calls, *window* of them in flight at any time, none waiting for another."""
        sent = 0

        async def lane() -> None:
            nonlocal sent
            while sent < n:
                sent += 1
                await echo.noop.remote(payload)

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(window)))
        return _summary([], n, time.perf_counter() - started)

    async def noop_closed(
        self, echo: Any, threads: int, seconds: float, payload: bytes
    ) -> dict[str, Any]:
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds

        async def thread() -> None:
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                await echo.noop.remote(payload)
                latencies.append((time.perf_counter() - t) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(thread() for _ in range(threads)))
        return _summary(latencies, len(latencies), time.perf_counter() - started)

    async def commits(
        self, targets: list[tuple[str, int]], seconds: float | None, total: int | None, tag: str
    ) -> dict[str, Any]:
        """Closed loops: ``threads`` sequential committers per ``(context, threads)``.

        Stops after *seconds*, or once *total* commits were made in all.
        """
        latencies: list[float] = []
        rejected = 0
        done = 0
        deadline = None if seconds is None else time.perf_counter() + seconds

        def more() -> bool:
            if total is not None and done >= total:
                return False
            return deadline is None or time.perf_counter() < deadline

        async def thread(handle: ContextHandle, k: int) -> None:
            nonlocal rejected, done
            frame, exists, base, i = f"{tag}/t{k}", False, await handle.version_async(), 0
            while more():
                t = time.perf_counter()
                receipt = await handle.submit_async(_tx(frame, exists, base, i))
                latencies.append((time.perf_counter() - t) * 1000)
                i += 1
                if receipt.committed:
                    exists, base, done = True, receipt.version, done + 1
                else:
                    rejected += 1
                    base = await handle.version_async()

        started = time.perf_counter()
        runs = [thread(self._handle(name), k) for name, threads in targets for k in range(threads)]
        await asyncio.gather(*runs)
        out = _summary(latencies, done, time.perf_counter() - started)
        out["rejected"] = rejected
        return out

    async def open_loop(self, name: str, rate: float, seconds: float, tag: str) -> dict[str, Any]:
        """Submissions scheduled at *rate* per second, answered or not; latency from schedule."""
        handle = self._handle(name)
        base = await handle.version_async()
        loop = asyncio.get_running_loop()
        latencies: list[float] = []
        n = max(1, int(rate * seconds))
        start = loop.time() + 0.05

        async def one(i: int) -> None:
            nonlocal base
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - loop.time()))
            receipt = await handle.submit_async(_tx(f"{tag}/o{i}", False, base, i))
            latencies.append((loop.time() - due) * 1000)
            if receipt.committed:
                base = max(base, receipt.version)

        await asyncio.gather(*(one(i) for i in range(n)))
        out = _summary(latencies, n, loop.time() - start)
        out["offered_rate"] = round(rate, 1)
        return out


def rss_mb(pid: int) -> dict[str, float]:
    """Resident set of *pid* in MiB: psutil if installed, else /proc (with its anon/file split)."""
    out: dict[str, float] = {}
    try:
        import psutil

        out["rss"] = psutil.Process(pid).memory_info().rss / 2**20
    except ImportError:
        pass
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out.setdefault("rss" if key == "VmRSS" else key, int(value.split()[0]) / 1024)
    except OSError:
        pass
    return {k: round(v, 1) for k, v in out.items()}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import ray

        self.args = args
        self.quick = args.quick
        self.seconds = args.seconds or (1.5 if self.quick else 5.0)
        self.dir = tempfile.mkdtemp(prefix="morphz-bench-actors-", dir=args.dir)
        self.node = current_node_id()
        options = {
            "num_cpus": 0,
            "max_concurrency": 1000,
            "namespace": NAMESPACE,
            "scheduling_strategy": pinned(self.node),
        }
        self.echo = ray.remote(Echo).options(**options).remote()
        self.loader = ray.remote(Loader).options(**options).remote()
        self.contexts: list[ContextHandle] = []
        probe = _tx("t/frame-of-a-typical-size", True, 123456, 7)
        self.payload = tx_to_msgpack(probe.model_copy(update={"client_id": "c-" + "0" * 32}))
        self.report: dict[str, Any] = {"machine": testbed.machine(self.dir)}

    def context(self) -> ContextHandle:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        handle = connect(name, store_dir=self.dir, namespace=NAMESPACE)
        self.contexts.append(handle)
        return handle

    def get(self, ref: Any) -> Any:
        import ray

        return ray.get(ref)

    def close(self) -> None:
        import ray

        for h in self.contexts:
            h.shutdown()
        ray.kill(self.loader)
        ray.kill(self.echo)
        shutil.rmtree(self.dir, ignore_errors=True)

    def say(self, text: str = "") -> None:
        if not self.args.json:
            print(text, flush=True)

    # -- (a), (b) ------------------------------------------------------------

    def pipelined(self) -> dict[str, Any]:
        n = 3000 if self.quick else 20000
        self.get(self.loader.noop_pipelined.remote(self.echo, 200, self.payload))  # warm up
        return dict(self.get(self.loader.noop_pipelined.remote(self.echo, n, self.payload)))

    def levels(self) -> None:
        before = self.pipelined()
        self.say(
            f"(a) transport: {before['rate']:,.0f} pipelined no-op calls/s to a bare actor "
            f"({before['count']} calls, {len(self.payload)}-byte payload)"
        )
        ctx = self.context()
        self.say()
        self.say("(b) durable commits through one context actor, closed loop")
        self.say(
            f"{'threads':>7} {'commits/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'batch':>6}"
            f" {'no-op/s':>9} {'ratio':>6} {'÷pipelined':>10}"
        )
        rows = []
        for n in LEVELS:
            noop = self.get(
                self.loader.noop_closed.remote(self.echo, n, self.seconds / 3, self.payload)
            )
            before_stats = ctx.stats()
            got = self.get(self.loader.commits.remote([(ctx.name, n)], self.seconds, None, f"l{n}"))
            after = ctx.stats()
            batches = after["batches"] - before_stats["batches"]
            txs = after["transactions"] - before_stats["transactions"]
            got["mean_batch"] = round(txs / batches, 2) if batches else 0.0
            got["threads"] = n
            got["noop_closed_rate"] = noop["rate"]
            got["ratio_noop_closed"] = testbed.ratio(got["rate"], noop["rate"])
            got["ratio_pipelined"] = testbed.ratio(got["rate"], before["rate"])
            rows.append(got)
            self.say(
                f"{n:>7} {got['rate']:>10,.0f} {got['p50_ms']:>7.2f} {got['p99_ms']:>7.2f}"
                f" {got['mean_batch']:>6.1f} {noop['rate']:>9,.0f} {got['ratio_noop_closed']:>6.3f}"
                f" {got['ratio_pipelined']:>10.3f}"
            )
        after_pipe = self.pipelined()
        self.say(
            f"transport again after the levels: {after_pipe['rate']:,.0f} pipelined no-op calls/s"
        )
        self.report["transport"] = {"before": before, "after": after_pipe}
        self.report["levels"] = rows
        eight = next((r for r in rows if r["threads"] == 8), None)
        if eight is not None:
            # The figure: 8 threads committing through one context actor, beside
            # 8 clients' no-op calls to a bare Ray actor, measured just before.
            self.report["commits_over_noop_8_threads"] = eight["ratio_noop_closed"]
            self.say(
                f"8 threads: {eight['rate']:,.0f} commits/s ÷ {eight['noop_closed_rate']:,.0f} "
                f"no-op calls/s of 8 clients to a bare actor = {eight['ratio_noop_closed']:.3f} "
                "(aim >= 0.90)"
            )
        peak = max(rows, key=lambda r: r["rate"])
        half = peak["rate"] / 2
        got = self.get(self.loader.open_loop.remote(ctx.name, half, self.seconds, "half"))
        self.report["half_peak"] = {
            **got,
            "peak_rate": peak["rate"],
            "peak_threads": peak["threads"],
        }
        self.say()
        self.say(
            f"(c) half of peak ({peak['rate']:,.0f}/s at {peak['threads']} threads), open loop: "
            f"offered {got['offered_rate']:,.0f}/s, achieved {got['rate']:,.0f}/s, "
            f"p50 {got['p50_ms']:.2f} ms, p99 {got['p99_ms']:.2f} ms"
        )

    # -- (d) ----------------------------------------------------------------

    def contexts_sweep(self) -> None:
        total = 8 if self.quick else 16
        self.say()
        self.say(f"(d) {total} threads in all, spread over 1, 2, 4 context actors")
        self.say(f"{'contexts':>8} {'commits/s':>10} {'p50 ms':>7} {'p99 ms':>7}")
        rows = []
        for count in CONTEXT_COUNTS:
            handles = [self.context() for _ in range(count)]
            targets = [(h.name, total // count) for h in handles]
            got = self.get(self.loader.commits.remote(targets, self.seconds, None, f"c{count}"))
            got["contexts"] = count
            rows.append(got)
            self.say(
                f"{count:>8} {got['rate']:>10,.0f} {got['p50_ms']:>7.2f} {got['p99_ms']:>7.2f}"
            )
        self.report["contexts"] = rows

    # -- (e) ----------------------------------------------------------------

    def conflicts(self) -> None:
        seconds = 2.0 if self.quick else 6.0
        self.say()
        self.say(
            f"(e) conflict rate, morphz loadtest: 8 threads, 1 context, 1 shared frame, {seconds} s"
        )
        self.say(
            f"{'conflict':>8} {'commits/s':>10} {'rejected':>9} {'retried':>8} {'gave up':>8}"
            f" {'p50 ms':>7} {'p99 ms':>7} {'history':>8}"
        )
        rows = []
        for rate in CONFLICT_RATES:
            doc = run_loadtest(
                {
                    "threads": 8,
                    "contexts": 1,
                    "duration_s": seconds,
                    "conflict_rate": rate,
                    "store_dir": self.dir,
                    "namespace": NAMESPACE,
                    "seed": 1,
                }
            )
            row = {
                k: doc[k]
                for k in (
                    "conflict_rate",
                    "throughput_tx_s",
                    "committed",
                    "rejected",
                    "retried",
                    "gave_up",
                    "latency_ms",
                    "history_ok",
                )
            }
            rows.append(row)
            self.say(
                f"{rate:>8.0%} {doc['throughput_tx_s']:>10,.1f} {doc['rejected']:>9}"
                f" {doc['retried']:>8} {doc['gave_up']:>8} {doc['latency_ms']['p50']:>7.2f}"
                f" {doc['latency_ms']['p99']:>7.2f} {'ok' if doc['history_ok'] else 'FAILED':>8}"
            )
        self.report["conflicts"] = rows

    # -- (f) ----------------------------------------------------------------

    def memory(self, total: int) -> None:
        ctx = self.context()
        pid = ctx.pid()
        step = max(1, total // 10)
        self.say()
        self.say(f"(f) memory: {total:,} commits through one context actor (pid {pid}), 16 threads")
        self.say(f"{'commits':>9} {'RSS MiB':>8} {'anon':>7} {'file':>7} {'commits/s':>10}")
        samples = [{"commits": 0, **rss_mb(pid), "rate": 0.0}]
        self.say(f"{0:>9,} {samples[0].get('rss', 0):>8.1f}")
        done = 0
        chunk = 0
        while done < total:
            n = min(step, total - done)
            got = self.get(self.loader.commits.remote([(ctx.name, 16)], None, n, f"m{chunk}"))
            chunk += 1
            done += got["count"]
            sample = {"commits": done, **rss_mb(pid), "rate": got["rate"]}
            samples.append(sample)
            self.say(
                f"{done:>9,} {sample.get('rss', 0):>8.1f} {sample.get('RssAnon', 0):>7.1f}"
                f" {sample.get('RssFile', 0):>7.1f} {got['rate']:>10,.0f}"
            )
        first, last = samples[1], samples[-1]
        growth = {
            key: round(last[key] - first[key], 1)
            for key in ("rss", "RssAnon", "RssFile")
            if key in first and key in last
        }
        self.say(
            "from the first 10 % to the end: "
            + ", ".join(f"{k} {v:+.1f} MiB" for k, v in growth.items())
            + " (RssFile: pages of the memory-mapped LMDB file, which grows with the log)"
        )
        self.report["memory"] = {"commits": total, "samples": samples, "growth_mb": growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a new local one)")
    parser.add_argument("--dir", default=None, help="scratch parent directory for the stores")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement")
    parser.add_argument(
        "--memory", type=int, default=None, help="commits of the memory mode (0: skip)"
    )
    parser.add_argument(
        "--only", choices=["levels", "contexts", "conflicts", "memory"], action="append"
    )
    args = parser.parse_args()
    args.dir = args.dir or testbed.scratch_parent()
    memory = args.memory if args.memory is not None else (20_000 if args.quick else 200_000)

    # Ray's driver prints raylet messages on stdout; with --json, stdout is the report's.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        report = run(args, memory)
    if args.json:
        print(json.dumps(report))


def run(args: argparse.Namespace, memory: int) -> dict[str, Any]:
    """Start Ray, run the chosen measurements, stop; the figures."""
    import logging

    import ray

    ray.init(
        address=args.address or "local",
        log_to_driver=False,
        logging_level=logging.WARNING,
        **({} if args.address else {"include_dashboard": False}),
    )
    bench = Bench(args)
    bench.say(f"bench_actors: {testbed.describe(bench.report['machine'])}")
    bench.say(f"Ray {ray.__version__}, {bench.seconds} s per measurement")
    bench.say()
    only = set(args.only or ["levels", "contexts", "conflicts", "memory"])
    try:
        if "levels" in only:
            bench.levels()
        if "contexts" in only:
            bench.contexts_sweep()
        if "conflicts" in only:
            bench.conflicts()
        if "memory" in only and memory > 0:
            bench.memory(memory)
    finally:
        bench.close()
        ray.shutdown()
    return bench.report


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
