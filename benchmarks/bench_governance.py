"""The cost of permission checks: durable commits through one context actor, enforcement on vs off.

Measured in one run, on one Ray cluster (a new local one unless ``--address``):
N asyncio threads in this driver each submit durable commits through
:class:`actors.client.ContextHandle` (each derives its own new frames, based on
the last version it saw, so everything commits) to

(a) a context actor without enforcement (the baseline), and
(b) a context actor with ``enforce=True``, every call carrying a capability
    token that the actor verifies (HMAC-SHA256, cached per token) and checks
    against the context's tenant, name and the operation;

alternating a/b/a/b rounds so drift hits both. Prints commits/s, p50/p99
latency and the cost of (b) relative to (a). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
import uuid
from typing import Any

import harness  # first: puts this checkout on sys.path

from actors.client import ContextHandle, connect
from actors.governance import issue_capability
from actors.loadtest import percentile

NAMESPACE = "morphz-bench-governance"


async def load(handle: ContextHandle, threads: int, seconds: float) -> dict[str, Any]:
    """Commits/s and latency of *threads* sequential submitters for *seconds*."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    seen = [await handle.version_async()]

    async def thread(k: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            i += 1
            frame = f"t{k}/n-{uuid.uuid4().hex[:8]}"
            tx = f"(context-tx (base-version {seen[0]}) (derive {frame} (step {i})))"
            t0 = time.perf_counter()
            receipt = await handle.submit_async(tx)
            latencies.append((time.perf_counter() - t0) * 1000)
            assert receipt.committed, receipt.errors
            seen[0] = max(seen[0], receipt.version)

    started = time.perf_counter()
    await asyncio.gather(*(thread(k) for k in range(threads)))
    took = time.perf_counter() - started
    return {
        "commits": len(latencies),
        "rate": round(len(latencies) / took, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a new local one)")
    parser.add_argument("--threads", type=int, default=16, help="concurrent submitters")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=None, help="a/b round pairs")
    args = parser.parse_args()
    seconds = args.seconds or (2.0 if args.quick else 8.0)
    rounds = args.rounds or (2 if args.quick else 4)

    import logging

    import ray

    ray.init(
        address=args.address or "local",
        log_to_driver=False,
        logging_level=logging.WARNING,
        **({} if args.address else {"include_dashboard": False}),
    )
    store = tempfile.mkdtemp(prefix="morphz-bench-gov-", dir=harness.scratch_parent())
    try:
        cap = issue_capability(
            store, holder="bench", tenant="acme", grants=[("bench-*", ["read", "commit", "admin"])]
        )
        off = connect("bench-off", store_dir=store, namespace=NAMESPACE, tenant="acme")
        on = connect(
            "bench-on",
            store_dir=store,
            namespace=NAMESPACE,
            tenant="acme",
            enforce=True,
            capability=cap,
        )
        asyncio.run(load(off, args.threads, 0.5))  # warm both up
        asyncio.run(load(on, args.threads, 0.5))
        results: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        for _ in range(rounds):
            for label, handle in (("off", off), ("on", on)):
                results[label].append(asyncio.run(load(handle, args.threads, seconds)))
        rate = {k: sum(r["rate"] for r in v) / len(v) for k, v in results.items()}
        report = {
            "machine": harness.machine(store),
            "threads": args.threads,
            "seconds_per_round": seconds,
            "rounds": rounds,
            "off": results["off"],
            "on": results["on"],
            "rate_off": round(rate["off"], 1),
            "rate_on": round(rate["on"], 1),
            "cost_pct": round(100 * (1 - rate["on"] / rate["off"]), 1) if rate["off"] else None,
            "denials": on.describe()["denials"],
        }
        off.shutdown()
        on.shutdown()
    finally:
        ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.threads} threads, {rounds} x {seconds:g} s per mode, one context actor each")
    for label in ("off", "on"):
        for r in report[label]:
            print(
                f"  enforce {label:3}  {r['rate']:8.1f} commits/s  p50 {r['p50_ms']:6.2f} ms"
                f"  p99 {r['p99_ms']:6.2f} ms"
            )
    print(
        f"mean: off {report['rate_off']} /s, on {report['rate_on']} /s:"
        f" permission checks cost {report['cost_pct']} %"
    )


if __name__ == "__main__":
    main()
