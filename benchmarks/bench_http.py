"""HTTP transactions/s against one context, beside the Ray handle's rate in the same run.

On one Ray cluster (a new local one unless ``--address``), one context actor
with a durable store, and the HTTP API (:mod:`servers.http_api`) served by Ray
Serve on a free loopback port:

* **http**: N concurrent clients (1, 8, 32; httpx ``AsyncClient`` tasks in
  this process, one connection each) each POSTing transactions as
  ``text/plain`` to ``/v1/contexts/{c}/transactions``, one after the other;
* **handle** (the baseline): N concurrent asyncio tasks in this process, each
  calling :meth:`actors.client.handle.ContextHandle.submit_async` with the same text;
* **http unbatched**: the same HTTP load against a second application of the
  same Serve instance built with ``batch=False`` (one ``submit`` per request,
  as before transactions arriving together were batched into one ``submit_many``);
* with ``--direct-ingress``, **http** and **http unbatched** go straight to each
  application's replica on its own port (asked of Serve's controller), and
  **through the proxy** is the batched application through Serve's proxy, which
  still runs, in the same run.

Serve's options are the command's: ``--replicas``, ``--max-ongoing``, and
``--throughput-optimized`` / ``--direct-ingress``, which set
``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` / ``RAY_SERVE_ENABLE_DIRECT_INGRESS=1`` before
Ray starts (they only take effect on a new local cluster, not with ``--address``).
HAProxy ingress (``RAY_SERVE_ENABLE_HA_PROXY=1``) needs an ``haproxy`` binary,
which the benchmark says when it is missing.

Every transaction revises the client's own frame based on its last receipt, so
everything is rebased and nothing conflicts; each is a durable commit. The two
sides alternate in rounds so drift on a shared machine hits both. Printed:
commits/s, p50/p99 latency in ms and the ratio http / handle (the issue's aim:
≥ 0.5 at 32 clients). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.server.connect import connect
from harness.loadtest import percentile

LEVELS = (1, 8, 32)
NAMESPACE = "morphz-bench-http"

Submit = Callable[[int, str], Awaitable[int]]
"""Submit the text for client *i*; answers the committed version."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _clients(n: int, count: int, submit: Submit, tag: str) -> dict[str, Any]:
    """*n* clients, *count* commits each, one after the other; rate and latencies."""
    latencies: list[float] = []

    async def one(i: int) -> None:
        frame = f"{tag}-{i}"
        version = await submit(i, f"(context-tx (base-version 0) (derive {frame} (step 0)))")
        for step in range(1, count):
            start = time.perf_counter()
            version = await submit(
                i, f"(context-tx (base-version {version}) (revise {frame} (step {step})))"
            )
            latencies.append((time.perf_counter() - start) * 1000)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    seconds = time.perf_counter() - start
    done = n * count
    return {
        "commits": done,
        "rate": round(done / seconds, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
    }


async def _http_round(url: str, n: int, count: int) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [httpx.AsyncClient(base_url=url, timeout=120, limits=limits) for _ in range(n)]
    headers = {"content-type": "text/plain", "x-morphz-request": "1"}

    async def submit(i: int, text: str) -> int:
        r = await clients[i].post("/transactions", content=text, headers=headers)
        doc = r.json()
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {doc}")
        return int(doc["version"])

    try:
        return await _clients(n, count, submit, "h" + uuid.uuid4().hex[:6])
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def _handle_round(handle: ContextHandle, n: int, count: int) -> dict[str, Any]:
    async def submit(i: int, text: str) -> int:
        receipt = await handle.submit_async(text)
        if not receipt.committed:
            raise RuntimeError(f"rejected: {receipt.errors}")
        return receipt.version

    return await _clients(n, count, submit, "r" + uuid.uuid4().hex[:6])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _merge(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out = {
        "rate": _median([r["rate"] for r in rounds]),
        "p50_ms": _median([r["p50_ms"] for r in rounds]),
        "p99_ms": max(r["p99_ms"] for r in rounds),
        "rounds": len(rounds),
    }
    if all("replica_cpu_ms" in r for r in rounds):
        out["replica_cpu_ms"] = _median([r["replica_cpu_ms"] for r in rounds])
    return out


def _paired(http: list[dict[str, Any]], base: list[dict[str, Any]]) -> float:
    """The median over rounds of each HTTP round's rate ÷ the handle round run just before it
    (drift on a shared machine hits a pair less than the whole run)."""
    return round(_median([h["rate"] / b["rate"] for h, b in zip(http, base, strict=True)]), 2)


def _replica_pids() -> dict[str, int]:
    """The process of each application's replica on a cluster this run started (children of
    its raylet), by application name: their CPU time is read around each HTTP round."""
    import ray

    node: Any = ray._private.worker._global_node
    raylet = node.all_processes["raylet"][0].process.pid
    pids: dict[str, int] = {}
    for task in os.listdir(f"/proc/{raylet}/task"):
        try:
            children = open(f"/proc/{raylet}/task/{task}/children").read().split()
        except OSError:
            continue
        for child in children:
            try:
                command = open(f"/proc/{child}/cmdline").read()
            except OSError:
                continue
            for app in ("morphz-bench-unbatched", "morphz-bench"):
                if f"ServeReplica:{app}:" in command:
                    pids.setdefault(app, int(child))
                    break
    return pids


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process *pid* so far (0 when unknown)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measured(pid: int | None, url: str, n: int, count: int) -> dict[str, Any]:
    """An HTTP round's figures, with the CPU milliseconds its replica *pid* spent per commit."""
    before = _cpu_seconds(pid)
    got = asyncio.run(_http_round(url, n, count))
    if pid is not None:
        got["replica_cpu_ms"] = round(1000 * (_cpu_seconds(pid) - before) / got["commits"], 3)
    return got


def _roots(port: int) -> tuple[str, str]:
    """The URL roots of the batched and the unbatched application: through Serve's proxy
    on *port*, or, with direct ingress, each application's replica on its own port (asked
    of Serve's controller, as an ingress in front of the replicas would)."""
    if os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") != "1":
        return f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/unbatched"
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    roots = []
    for app in ("morphz-bench", "morphz-bench-unbatched"):
        for _ in range(100):
            groups = ray.get(controller.get_target_groups.remote(app))
            http = [g for g in groups if str(g.protocol).endswith("HTTP") and g.targets]
            if http and http[0].targets[0].port != port:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"no direct-ingress replica of {app}")
        # the replica binds Serve's HTTP host (loopback here), not the node address it reports
        prefix = http[0].route_prefix.rstrip("/")
        roots.append(f"http://127.0.0.1:{http[0].targets[0].port}{prefix}")
    return roots[0], roots[1]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start Ray, the context and Serve; measure every level; stop what was started."""
    import ray
    from ray import serve

    from actors.client.joining import init_ray
    from servers.http_api import serve_app

    commits = 15 if args.quick else 60
    rounds = args.rounds or (2 if args.quick else 3)
    parent = args.dir or testbed.scratch_parent()
    store = tempfile.mkdtemp(prefix="morphz-bench-http-", dir=parent)
    started = init_ray(args.address)
    port = _free_port()
    results: dict[str, Any] = {"machine": testbed.machine(store), "levels": {}}
    results["serve"] = {
        "replicas": args.replicas,
        "max_ongoing_requests": args.max_ongoing,
        "throughput_optimized": os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED") == "1",
        "direct_ingress": os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") == "1",
    }
    try:
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        options = {"replicas": args.replicas, "max_ongoing_requests": args.max_ongoing}
        app = serve_app(store, namespace=NAMESPACE, **options)
        serve.run(app, name="morphz-bench", route_prefix="/")
        single = serve_app(store, namespace=NAMESPACE, batch=False, **options)
        serve.run(single, name="morphz-bench-unbatched", route_prefix="/unbatched")
        name = "bench-" + uuid.uuid4().hex[:6]
        handle = connect(name, store_dir=store, namespace=NAMESPACE)
        root, root_single = _roots(port)
        results["serve"]["roots"] = [root, root_single]
        url = f"{root}/v1/contexts/{name}"
        url_single = f"{root_single}/v1/contexts/{name}"
        # with direct ingress Serve's proxy still runs: the batched app through it, beside
        direct = os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") == "1"
        proxied = f"http://127.0.0.1:{port}/v1/contexts/{name}" if direct else None
        for warm in (url, url_single, proxied):  # the replica finds the actor
            if warm is not None:
                asyncio.run(_http_round(warm, 1, 3))
        pids = _replica_pids() if started else {}
        pid, pid_single = pids.get("morphz-bench"), pids.get("morphz-bench-unbatched")
        for n in LEVELS:
            count = max(3, commits // max(1, n // 4))
            http: list[dict[str, Any]] = []
            unbatched: list[dict[str, Any]] = []
            base: list[dict[str, Any]] = []
            proxy: list[dict[str, Any]] = []
            for _ in range(rounds):
                base.append(asyncio.run(_handle_round(handle, n, count)))
                http.append(_measured(pid, url, n, count))
                unbatched.append(_measured(pid_single, url_single, n, count))
                if proxied is not None:
                    proxy.append(asyncio.run(_http_round(proxied, n, count)))
            h, b, u = _merge(http), _merge(base), _merge(unbatched)
            results["levels"][str(n)] = {
                "http": h,
                "http_unbatched": u,
                "handle": b,
                "ratio": round(h["rate"] / b["rate"], 2) if b["rate"] else None,
                "ratio_unbatched": round(u["rate"] / b["rate"], 2) if b["rate"] else None,
                "ratio_paired": _paired(http, base),
            }
            if proxy:
                p = _merge(proxy)
                results["levels"][str(n)]["http_proxy"] = p
                results["levels"][str(n)]["ratio_proxy"] = round(p["rate"] / b["rate"], 2)
            if not args.json:
                got = results["levels"][str(n)]
                print(
                    f"{n:>3} clients  http {h['rate']:>7.1f} tx/s (p50 {h['p50_ms']:.1f},"
                    f" p99 {h['p99_ms']:.1f} ms)  unbatched {u['rate']:>7.1f}"
                    f"  handle {b['rate']:>7.1f} (p50 {b['p50_ms']:.1f}, p99 {b['p99_ms']:.1f})"
                    f"  ratio {got['ratio']} (paired rounds {got['ratio_paired']},"
                    f" unbatched {got['ratio_unbatched']}"
                    + (f", through the proxy {got['ratio_proxy']})" if proxy else ")")
                    + (
                        f"  replica CPU {h['replica_cpu_ms']:.2f} ms/commit"
                        f" (unbatched {u['replica_cpu_ms']:.2f})"
                        if "replica_cpu_ms" in h and "replica_cpu_ms" in u
                        else ""
                    ),
                    flush=True,
                )
        handle.shutdown()
    finally:
        serve.shutdown()
        if started:
            ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)
    return results


def main() -> None:
    """Parse the options, run, print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a new local one)")
    parser.add_argument("--dir", default=None, help="scratch parent directory for the store")
    parser.add_argument(
        "--rounds", type=int, default=0, help="rounds per level (default 2 quick, else 3)"
    )
    parser.add_argument("--replicas", type=int, default=1, help="Serve replicas (default 1)")
    parser.add_argument(
        "--max-ongoing", type=int, default=256, help="max_ongoing_requests per replica"
    )
    parser.add_argument(
        "--throughput-optimized",
        action="store_true",
        help="RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (a new local cluster only)",
    )
    parser.add_argument(
        "--direct-ingress",
        action="store_true",
        help="RAY_SERVE_ENABLE_DIRECT_INGRESS=1 (a new local cluster only)",
    )
    args = parser.parse_args()
    if args.throughput_optimized:
        os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
    if args.direct_ingress:
        os.environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "1"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not args.json:
        print(f"load average (1 min): {os.getloadavg()[0]:.2f}; cpus {os.cpu_count()}")
    results = run(args)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
