"""The cost of the context actors' metrics on the commit path, beside the same actor without them.

Measured in one run, on one new local Ray cluster: two context actors, each in
its own worker process, identical but for ``MORPHZ_METRICS`` (``1``: metrics
recorded through ``ray.util.metrics``; ``0``: the no-op recorder, the
baseline). Sequential committers (asyncio tasks in the driver, each deriving
new frames through :class:`actors.client.handle.ContextHandle`) drive one actor, then
the other, alternating in rounds so that drift on a shared machine hits both
sides. Printed: commits/s, p50/p99 latency and the ratio, at 1 committer (one
write per transaction: every record is per transaction) and at 16 (group
commits). Then, load-independent, the CPU cost of the recording calls
themselves in this Ray-connected process: µs per transaction for a write of 1
and of 64 transactions (``group`` + one ``latency`` each), beside the p50
commit latency measured above. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.client.joining import remote_class
from actors.client.names import actor_name
from actors.client.nodes import current_node_id, pinned
from actors.server.context_actor import ContextActor
from actors.server.metrics import ENV
from harness.loadtest import percentile

NAMESPACE = "morphz-bench-metrics"
LEVELS = (1, 16)


def _actor(store: str, name: str, record: bool) -> ContextHandle:
    actor = (
        remote_class(ContextActor)
        .options(
            name=actor_name(name),
            namespace=NAMESPACE,
            num_cpus=0,
            max_concurrency=1000,
            scheduling_strategy=pinned(current_node_id()),
            runtime_env={"env_vars": {ENV: "1" if record else "0"}},
        )
        .remote(store, name, namespace=NAMESPACE)
    )
    handle = ContextHandle(actor, name, namespace=NAMESPACE)
    handle.handshake()
    return handle


async def _round(handle: ContextHandle, threads: int, seconds: float) -> tuple[int, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def thread() -> None:
        tag = uuid.uuid4().hex[:8]
        i = 0
        while time.perf_counter() < deadline:
            base = await handle.version_async()
            t = time.perf_counter()
            r = await handle.submit_async(
                f"(context-tx (base-version {base}) (derive t{tag}/{i} (step {i})))"
            )
            latencies.append((time.perf_counter() - t) * 1000)
            assert r.committed, r
            i += 1

    await asyncio.gather(*(thread() for _ in range(threads)))
    return len(latencies), latencies


def _recording_cost() -> dict[str, float]:
    """µs of recording per transaction, for writes of 1 and of 64 transactions."""
    from actors.server.metrics import ContextMetrics

    m = ContextMetrics("bench", NAMESPACE)
    assert m.enabled
    receipt = {"status": "committed", "rebased": False, "duplicate": False}
    out = {}
    for size, n in ((1, 20_000), (64, 2_000)):
        group = [receipt] * size
        started = time.perf_counter()
        for _ in range(n):
            m.group(group, 0.001)
            for _ in range(size):
                m.latency(0.001)
        out[str(size)] = round((time.perf_counter() - started) / (n * size) * 1e6, 2)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start Ray, measure both actors in alternating rounds, stop; the figures."""
    import ray

    ray.init(
        address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    where = tempfile.mkdtemp(prefix="bench-metrics-", dir=args.dir)
    report: dict[str, Any] = {"machine": testbed.machine(where), "levels": {}}
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    try:
        on = _actor(os.path.join(where, "on"), "on", True)
        off = _actor(os.path.join(where, "off"), "off", False)
        say(f"bench_metrics: {testbed.describe(report['machine'])}")
        say(f"Ray {ray.__version__}; {args.rounds} rounds of {args.seconds} s per side and level")
        say()
        say(f"{'committers':>10}  {'side':<24} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        for threads in LEVELS:
            totals = {"metrics": [0, 0.0, []], "baseline": [0, 0.0, []]}
            asyncio.run(_round(on, threads, 0.3))  # warm both workers
            asyncio.run(_round(off, threads, 0.3))
            for r in range(args.rounds):
                order = [("metrics", on), ("baseline", off)]
                for side, handle in order if r % 2 == 0 else order[::-1]:
                    started = time.perf_counter()
                    n, lat = asyncio.run(_round(handle, threads, args.seconds))
                    t = totals[side]
                    t[0] += n  # type: ignore[operator]
                    t[1] += time.perf_counter() - started  # type: ignore[operator]
                    t[2] += lat  # type: ignore[operator]
            level: dict[str, Any] = {}
            for side, (n, secs, lat) in totals.items():
                fig = {
                    "commits": n,
                    "rate": round(n / secs, 1),  # type: ignore[operator]
                    "p50_ms": round(percentile(lat, 50), 2),  # type: ignore[arg-type]
                    "p99_ms": round(percentile(lat, 99), 2),  # type: ignore[arg-type]
                }
                level[side] = fig
                label = "metrics on" if side == "metrics" else "baseline (MORPHZ_METRICS=0)"
                say(
                    f"{threads:>10}  {label:<24} {fig['rate']:>10,.0f}"
                    f" {fig['p50_ms']:>8.2f} {fig['p99_ms']:>8.2f}"
                )
            level["ratio"] = round(level["metrics"]["rate"] / level["baseline"]["rate"], 3)
            say(f"{'':>10}  {'ratio (on / baseline)':<24} {level['ratio']:>10.3f}")
            report["levels"][str(threads)] = level
        on.shutdown()
        off.shutdown()
        report["recording_us_per_tx"] = _recording_cost()
        base = report["levels"]["1"]["baseline"]["p50_ms"] * 1000
        for size, us in report["recording_us_per_tx"].items():
            say(
                f"recording, writes of {size:>2}: {us:6.2f} µs per transaction"
                f" ({us / base:.2%} of the baseline's p50 commit, {base:,.0f} µs)"
            )
    finally:
        ray.shutdown()
        shutil.rmtree(where, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--dir", default=None, help="scratch parent directory for the stores")
    args = parser.parse_args()
    args.dir = args.dir or testbed.scratch_parent()
    args.rounds = 4 if args.quick else 10
    args.seconds = 1.0 if args.quick else 2.0
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        report = run(args)
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
