"""The cost of governance: durable commits through a context actor, checks and admission on vs off.

Measured in one run, on one Ray cluster (a new local one unless ``--address``),
against two fresh contexts kept for the whole run:

* **off**: a context actor without enforcement and without the governance worker;
* **on**: ``connect(..., enforce=True, capability=token, governance_every=E)``:
  every call carries a capability token that the actor verifies (HMAC-SHA256,
  cached per token) and checks against the context's tenant, name and the
  operation, and every E seconds the actor runs a governance pass (admission
  of the candidates, then the quarantine scan) on its store thread.

N asyncio threads in this driver each submit durable commits through
:class:`actors.client.handle.ContextHandle`, the same transactions in both modes: each
derives a new frame, based on the last version the thread saw (so everything
commits), and every other one also marks it ``(envelope F (trust candidate))``,
so half the frames are candidates. In *on* the worker reviews and admits them;
in *off* they stay candidates. The rounds alternate off/on/off/on… (short, so
drift and the neighbours' load hit both sides alike); the cost is computed per
off/on pair and reported as the median with its spread, beside the overall
rates. Each round also records the CPU seconds of both actor processes (from
``/proc``, when they run on this machine): the measured actor's CPU per commit
moves less with the neighbours' load than its rate, and the *on* actor's CPU
during an *off* round is its worker (which never pauses) competing for the
cores. Then a single-thread latency comparison (same alternation), and what
admission did: candidates admitted by the worker (from the audit log), those
still waiting, passes run, and the time of one pass over the final context.

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.server.connect import connect
from actors.server.guard import issue_capability
from harness.loadtest import percentile

NAMESPACE = "morphz-bench-governance"
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Mode:
    """One side of the comparison: its handle, actor process and what it was sent."""

    label: str
    handle: ContextHandle
    pid: int
    numbers: itertools.count[int] = field(default_factory=itertools.count)
    commits: int = 0
    candidates: int = 0

    def cpu(self) -> float | None:
        """CPU seconds (user + system) of the actor process, if it runs on this machine."""
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / TICKS


async def load(mode: Mode, threads: int, seconds: float) -> dict[str, Any]:
    """Commits/s and latency of *threads* sequential submitters to *mode* for *seconds*."""
    latencies: list[float] = []
    candidates = [0]
    seen = [await mode.handle.version_async()]
    deadline = time.perf_counter() + seconds

    async def thread() -> None:
        while time.perf_counter() < deadline:
            n = next(mode.numbers)
            frame = f"result/{n}"
            mark = f" (envelope {frame} (trust candidate))" if n % 2 else ""
            tx = f"(context-tx (base-version {seen[0]}) (derive {frame} (step {n})){mark})"
            t0 = time.perf_counter()
            receipt = await mode.handle.submit_async(tx)
            latencies.append((time.perf_counter() - t0) * 1000)
            assert receipt.committed, receipt.errors
            candidates[0] += n % 2
            seen[0] = max(seen[0], receipt.version)

    started = time.perf_counter()
    await asyncio.gather(*(thread() for _ in range(threads)))
    took = time.perf_counter() - started
    mode.commits += len(latencies)
    mode.candidates += candidates[0]
    return {
        "commits": len(latencies),
        "rate": round(len(latencies) / took, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "_latencies": latencies,
    }


def measured(mode: Mode, others: list[Mode], threads: int, seconds: float) -> dict[str, Any]:
    """:func:`load` on *mode*, with the CPU seconds every actor used meanwhile.

    Also the CPU milliseconds *mode*'s actor spent per commit: a figure that
    moves less with the neighbours' load than the rate does.
    """
    before = [m.cpu() for m in others]
    result = asyncio.run(load(mode, threads, seconds))
    for m, b in zip(others, before, strict=True):
        a = m.cpu()
        result[f"cpu_{m.label}_s"] = None if a is None or b is None else round(a - b, 3)
    own = result[f"cpu_{mode.label}_s"]
    result["cpu_ms_per_commit"] = (
        round(own * 1000 / result["commits"], 3) if own is not None and result["commits"] else None
    )
    return result


def cost(off: float, on: float) -> float | None:
    """How much slower *on* is than *off*, in percent."""
    return round(100 * (1 - on / off), 1) if off else None


def extra(off: float | None, on: float | None) -> float | None:
    """How much more *on* takes than *off* (CPU per commit), in percent."""
    return round(100 * (on / off - 1), 1) if off and on is not None else None


def spread(values: list[float]) -> dict[str, float | None]:
    """Median, min and max of *values* (None when empty)."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(values), 1), "min": min(values), "max": max(values)}


def admission_report(on: Mode, off: Mode, every: float) -> dict[str, Any]:
    """What the worker did in *on* (from its audit log), and what waits in both."""
    passes = on.handle.stats()["governance_passes"]
    wait = 3 * every + 5 if every <= 20 else 0.0  # a long --every: no pass to wait for
    deadline = time.monotonic() + wait
    while on.handle.stats()["governance_passes"] < passes + 2 and time.monotonic() < deadline:
        time.sleep(min(every, 0.5))  # let the worker see the last round's candidates
    verdicts: dict[str, int] = {}
    after = 0
    while True:
        page = on.handle.audit(after=after, limit=1000)
        if not page:
            break
        after = page[-1]["seq"]
        for entry in page:
            if entry.get("method") == "governance_pass":
                for d in entry.get("decisions") or ():
                    verdicts[d["verdict"]] = verdicts.get(d["verdict"], 0) + 1
    waiting = {m.label: len(m.handle.pending()["items"]) for m in (off, on)}
    stats = on.handle.stats()
    t0 = time.perf_counter()
    on.handle.admit()
    t1 = time.perf_counter()
    on.handle.quarantine_scan()
    t2 = time.perf_counter()
    return {
        "candidates_sent_off": off.candidates,
        "candidates_sent_on": on.candidates,
        "pending_off": waiting["off"],
        "pending_on": waiting["on"],
        "worker_accepted": verdicts.get("accept", 0),
        "worker_rejected": verdicts.get("reject", 0),
        "worker_quarantined": verdicts.get("quarantine", 0),
        "passes": stats["governance_passes"],
        "pass_errors": stats["governance_errors"],
        "frames_on": on.commits,
        "admit_ms": round((t1 - t0) * 1000, 1),
        "scan_ms": round((t2 - t1) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 pairs of 1.5 s rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a new local one)")
    parser.add_argument("--threads", type=int, default=16, help="concurrent submitters")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per round")
    parser.add_argument("--pairs", type=int, default=None, help="off/on round pairs")
    parser.add_argument(
        "--every", type=float, default=1.0, help="seconds between governance passes (on)"
    )
    args = parser.parse_args()
    seconds = args.seconds or (1.5 if args.quick else 3.0)
    pairs = args.pairs or (3 if args.quick else 8)
    lat_seconds, lat_rounds = (0.5, 2) if args.quick else (1.0, 4)

    import logging

    import ray

    local: dict[str, Any] = {} if args.address else {"include_dashboard": False}
    ray.init(
        address=args.address or "local",
        log_to_driver=False,
        logging_level=logging.WARNING,
        **local,
    )
    store = tempfile.mkdtemp(prefix="morphz-bench-gov-", dir=testbed.scratch_parent())
    try:
        machine = testbed.machine(store)
        cap = issue_capability(
            store, holder="bench", tenant="acme", grants=[("bench-*", ["read", "commit", "admin"])]
        )
        h_off = connect("bench-off", store_dir=store, namespace=NAMESPACE, tenant="acme")
        h_on = connect(
            "bench-on",
            store_dir=store,
            namespace=NAMESPACE,
            tenant="acme",
            enforce=True,
            capability=cap,
            governance_every=args.every,
        )
        off, on = Mode("off", h_off, h_off.pid()), Mode("on", h_on, h_on.pid())
        modes = [off, on]
        for m in modes:  # warm both up
            asyncio.run(load(m, args.threads, 2 * seconds / 3))
        rounds: list[dict[str, Any]] = []
        for i in range(pairs):
            for m in modes:
                r = measured(m, modes, args.threads, seconds)
                rounds.append({"pair": i, "mode": m.label, "frames_after": m.commits} | r)
        latency: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(lat_rounds):
            for m in modes:
                latency[m.label] += asyncio.run(load(m, 1, lat_seconds))["_latencies"]
        admission = admission_report(on, off, args.every)
        denials = h_on.describe()["denials"]
        h_off.shutdown()
        h_on.shutdown()
        machine_end = testbed.machine(store)
    finally:
        ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)

    for r in rounds:
        del r["_latencies"]
    by_mode = {label: [r for r in rounds if r["mode"] == label] for label in ("off", "on")}
    rate = {label: [r["rate"] for r in v] for label, v in by_mode.items()}
    per_pair = [
        {
            "pair": i,
            "off": a["rate"],
            "on": b["rate"],
            "cost_pct": cost(a["rate"], b["rate"]),
            "cpu_extra_pct": extra(a["cpu_ms_per_commit"], b["cpu_ms_per_commit"]),
        }
        for i, (a, b) in enumerate(zip(by_mode["off"], by_mode["on"], strict=True))
    ]
    costs = [p["cost_pct"] for p in per_pair if p["cost_pct"] is not None]
    cpu_extra = [p["cpu_extra_pct"] for p in per_pair if p["cpu_extra_pct"] is not None]
    pair_cost, pair_cpu = spread(costs), spread(cpu_extra)
    report = {
        "machine": machine,
        "load_avg_1m_end": machine_end["load_avg_1m"],
        "threads": args.threads,
        "seconds_per_round": seconds,
        "pairs": pairs,
        "governance_every_s": args.every,
        "rounds": rounds,
        "per_pair": per_pair,
        "cost_pct_median": pair_cost["median"],
        "cost_pct_min": pair_cost["min"],
        "cost_pct_max": pair_cost["max"],
        "cpu_extra_pct_median": pair_cpu["median"],
        "cpu_extra_pct_min": pair_cpu["min"],
        "cpu_extra_pct_max": pair_cpu["max"],
        "rate_off": round(statistics.mean(rate["off"]), 1),
        "rate_on": round(statistics.mean(rate["on"]), 1),
        "cost_pct_overall": cost(statistics.mean(rate["off"]), statistics.mean(rate["on"])),
        "latency_1_thread": {
            label: {
                "commits": len(v),
                "p50_ms": round(percentile(v, 50), 2),
                "p99_ms": round(percentile(v, 99), 2),
                "max_ms": round(max(v, default=0.0), 2),
            }
            for label, v in latency.items()
        },
        "admission": admission,
        "denials": denials,
    }
    if args.json:
        print(json.dumps(report))
        return
    print(testbed.describe(machine) + f"; load at the end {report['load_avg_1m_end']}")
    print(
        f"{args.threads} threads, {pairs} off/on pairs of {seconds:g} s rounds, one context actor"
        f" per mode; on = enforce + capability + governance pass every {args.every:g} s;"
        " half of the transactions derive a candidate"
    )
    print("pair  mode  commits/s   p50 ms   p99 ms  frames  CPU ms/commit  actors' CPU s off/on")
    for r in rounds:
        print(
            f"{r['pair']:4}  {r['mode']:4} {r['rate']:9.1f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}"
            f" {r['frames_after']:7}  {r['cpu_ms_per_commit']!s:>13}"
            f"  {r['cpu_off_s']}/{r['cpu_on_s']}"
        )
    print("throughput cost per pair (%): " + ", ".join(f"{c:g}" for c in costs))
    print(
        f"median pair cost {report['cost_pct_median']} % (min {report['cost_pct_min']},"
        f" max {report['cost_pct_max']}); overall: off {report['rate_off']} /s,"
        f" on {report['rate_on']} /s, cost {report['cost_pct_overall']} %"
    )
    print(
        f"actor CPU per commit, on vs off: median {report['cpu_extra_pct_median']} % more"
        f" (min {report['cpu_extra_pct_min']}, max {report['cpu_extra_pct_max']})"
    )
    lat = report["latency_1_thread"]
    print(
        "1 thread, durable commit latency: "
        + "; ".join(
            f"{k} p50 {v['p50_ms']} ms p99 {v['p99_ms']} ms max {v['max_ms']} ms"
            f" ({v['commits']} commits)"
            for k, v in lat.items()
        )
    )
    a = admission
    print(
        f"admission: on sent {a['candidates_sent_on']} candidates, the worker accepted"
        f" {a['worker_accepted']} (rejected {a['worker_rejected']}, quarantined"
        f" {a['worker_quarantined']}) in {a['passes']} passes ({a['pass_errors']} errors),"
        f" {a['pending_on']} still pending; off sent {a['candidates_sent_off']},"
        f" {a['pending_off']} pending"
    )
    print(
        f"one pass over the final on context ({a['frames_on']} frames):"
        f" admit {a['admit_ms']} ms + scan {a['scan_ms']} ms; denials {denials}"
    )


if __name__ == "__main__":
    main()
