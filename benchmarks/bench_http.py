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
import contextlib
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
from urllib.parse import urlsplit

import testbed  # first: puts this checkout on sys.path

from actors.client.handle import ContextHandle
from actors.server.connect import connect
from harness.loadtest import percentile

LEVELS = (1, 8, 32)
PREFIXES = {"morphz-bench": "", "morphz-bench-unbatched": "/unbatched"}
"""The route prefix of each application the benchmark serves."""
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


class RawClient:
    """A minimal HTTP/1.1 keep-alive client: one connection, one request at a time.

    It writes each request as one pre-built byte string (the headers are fixed but for
    ``Content-Length``) and reads the reply by its ``Content-Length`` (or a chunked body),
    no more: a load generator that spends on a request a fraction of what a general client
    does (httpx ≈ 2 ms of CPU per request on this machine), so the figures measure the
    server. Benchmark code only: it handles the replies this API gives, nothing else.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path.rstrip("/")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.head = (
            f"Host: {self.host}:{self.port}\r\nContent-Type: text/plain\r\n"
            "X-Morphz-Request: 1\r\nContent-Length: "
        ).encode()

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST *body* to *path* (under the URL's path); the status and the reply's body."""
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        line = f"POST {self.path}{path} HTTP/1.1\r\n".encode()
        self.writer.write(b"".join((line, self.head, b"%d\r\n\r\n" % len(body), body)))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at >= 0:
            end = lower.index(b"\r\n", at + 2)
            return status, await self.reader.readexactly(int(head[at + 17 : end]))
        chunks = []
        while size := int((await self.reader.readline()).strip(), 16):
            chunks.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()
        return status, b"".join(chunks)

    async def aclose(self) -> None:
        """Close the connection."""
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


def _raw_post(url: str, n: int) -> tuple[Submit, Callable[[], Awaitable[Any]]]:
    clients = [RawClient(url) for _ in range(n)]

    async def submit(i: int, text: str) -> int:
        status, body = await clients[i].post("/transactions", text.encode())
        doc = json.loads(body)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {doc}")
        return int(doc["version"])

    async def close() -> None:
        await asyncio.gather(*(c.aclose() for c in clients))

    return submit, close


def _httpx_post(url: str, n: int) -> tuple[Submit, Callable[[], Awaitable[Any]]]:
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

    async def close() -> None:
        await asyncio.gather(*(c.aclose() for c in clients))

    return submit, close


CLIENTS = {"raw": _raw_post, "httpx": _httpx_post}
"""The HTTP load clients: ``raw`` (:class:`RawClient`, the default) or ``httpx``."""


async def _http_round(url: str, n: int, count: int, client: str = "raw") -> dict[str, Any]:
    submit, close = CLIENTS[client](url, n)
    cpu = time.process_time()
    try:
        got = await _clients(n, count, submit, "h" + uuid.uuid4().hex[:6])
    finally:
        await close()
    got["client_cpu_ms"] = round(1000 * (time.process_time() - cpu) / got["commits"], 3)
    return got


async def _handle_round(handle: ContextHandle, n: int, count: int) -> dict[str, Any]:
    async def submit(i: int, text: str) -> int:
        receipt = await handle.submit_async(text)
        if not receipt.committed:
            raise RuntimeError(f"rejected: {receipt.errors}")
        return receipt.version

    cpu = time.process_time()
    got = await _clients(n, count, submit, "r" + uuid.uuid4().hex[:6])
    got["client_cpu_ms"] = round(1000 * (time.process_time() - cpu) / got["commits"], 3)
    return got


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
    for key in ("replica_cpu_ms", "client_cpu_ms"):
        if all(key in r for r in rounds):
            out[key] = _median([r[key] for r in rounds])
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


def _measured(pid: int | None, url: str, n: int, count: int, client: str = "raw") -> dict[str, Any]:
    """An HTTP round's figures, with the CPU milliseconds its replica *pid* spent per commit."""
    before = _cpu_seconds(pid)
    got = asyncio.run(_http_round(url, n, count, client))
    if pid is not None:
        got["replica_cpu_ms"] = round(1000 * (_cpu_seconds(pid) - before) / got["commits"], 3)
    return got


def _roots(port: int, direct: bool, apps: tuple[str, ...]) -> list[str]:
    """The URL roots of the applications *apps* (the batched one at ``/``, the unbatched
    one at ``/unbatched``): through Serve's proxy on *port*, or, with direct ingress, each
    application's replica on its own port (asked of Serve's controller, as an ingress in
    front of the replicas would)."""
    if not direct:
        return [f"http://127.0.0.1:{port}{PREFIXES[app]}" for app in apps]
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    roots = []
    for app in apps:
        for _ in range(100):
            # as an ingress in front asks (HAProxy mode answers itself to anyone else)
            groups = ray.get(controller.get_target_groups.remote(app, True))
            http = [g for g in groups if str(g.protocol).endswith("HTTP") and g.targets]
            if http and http[0].targets[0].port != port:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"no direct-ingress replica of {app}")
        # the replica binds Serve's HTTP host (loopback here), not the node address it reports
        prefix = http[0].route_prefix.rstrip("/")
        roots.append(f"http://127.0.0.1:{http[0].targets[0].port}{prefix}")
    return roots


def _haproxy_env(files: str) -> dict[str, str]:
    """What ``RAY_SERVE_ENABLE_HA_PROXY=1`` needs to run beside other clusters on one
    machine: its files in *files* (not the shared ``/tmp/haproxy-serve``; a short path, as
    Serve adds a 56-character directory and a socket path holds at most 97) and free ports
    for its stats page and metrics."""
    return {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": os.path.join(files, "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": os.path.join(files, "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": files,
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": os.path.join(files, "server-state"),
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": os.path.join(files, "metrics.sock"),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(_free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(_free_port()),
    }


def _direct() -> bool:
    """Whether replicas listen on ports of their own (direct ingress, also implied by
    HAProxy ingress and by Serve's throughput-optimized mode)."""
    return any(
        os.environ.get(v) == "1"
        for v in (
            "RAY_SERVE_ENABLE_DIRECT_INGRESS",
            "RAY_SERVE_ENABLE_HA_PROXY",
            "RAY_SERVE_THROUGHPUT_OPTIMIZED",
        )
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start Ray, the context and Serve; measure every level; stop what was started."""
    import ray
    from ray import serve

    from actors.client.joining import init_ray
    from servers.http_api import serve_app

    commits = args.commits or (15 if args.quick else 60)
    rounds = args.rounds or (2 if args.quick else 3)
    parent = args.dir or testbed.scratch_parent()
    store = tempfile.mkdtemp(prefix="morphz-bench-http-", dir=parent)
    haproxy = tempfile.mkdtemp(prefix="mzh-", dir="/tmp") if args.haproxy else None
    if haproxy is not None:
        os.environ.update(_haproxy_env(haproxy))
    started = init_ray(args.address)
    port = _free_port()
    direct = _direct()
    results: dict[str, Any] = {"machine": testbed.machine(store), "levels": {}}
    results["serve"] = {
        "replicas": args.replicas,
        "max_ongoing_requests": args.max_ongoing,
        "throughput_optimized": os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED") == "1",
        "haproxy": os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1",
        "direct_ingress": direct,
        "client": args.client,
    }
    main_client = "httpx" if args.client == "httpx" else "raw"
    try:
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        options = {"replicas": args.replicas, "max_ongoing_requests": args.max_ongoing}
        app = serve_app(store, namespace=NAMESPACE, **options)
        serve.run(app, name="morphz-bench", route_prefix=PREFIXES["morphz-bench"] or "/")
        if args.unbatched:
            single = serve_app(store, namespace=NAMESPACE, batch=False, **options)
            serve.run(
                single,
                name="morphz-bench-unbatched",
                route_prefix=PREFIXES["morphz-bench-unbatched"],
            )
        name = "bench-" + uuid.uuid4().hex[:6]
        handle = connect(name, store_dir=store, namespace=NAMESPACE)
        apps = ("morphz-bench", "morphz-bench-unbatched") if args.unbatched else ("morphz-bench",)
        roots = _roots(port, direct, apps)
        results["serve"]["roots"] = roots
        urls: dict[str, str] = {"http": f"{roots[0]}/v1/contexts/{name}"}
        if args.unbatched:
            urls["http_unbatched"] = f"{roots[1]}/v1/contexts/{name}"
        # with direct ingress Serve's proxy (or HAProxy) still listens on its port: the
        # batched app through it, beside
        if direct:
            urls["http_proxy"] = f"http://127.0.0.1:{port}/v1/contexts/{name}"
        for url in urls.values():  # the replica finds the actor
            asyncio.run(_http_round(url, 1, 3, main_client))
        pids = _replica_pids() if started else {}
        sides: list[tuple[str, str, str, int | None]] = [
            ("http", urls["http"], main_client, pids.get("morphz-bench"))
        ]
        if args.client == "both":
            sides.append(("http_httpx", urls["http"], "httpx", pids.get("morphz-bench")))
        if args.unbatched:
            sides.append(
                (
                    "http_unbatched",
                    urls["http_unbatched"],
                    main_client,
                    pids.get("morphz-bench-unbatched"),
                )
            )
        if direct:
            sides.append(("http_proxy", urls["http_proxy"], main_client, None))
        for n in LEVELS:
            count = max(3, commits // max(1, n // 4))
            base: list[dict[str, Any]] = []
            got: dict[str, list[dict[str, Any]]] = {side: [] for side, *_ in sides}
            for _ in range(rounds):
                base.append(asyncio.run(_handle_round(handle, n, count)))
                for side, url, client, pid in sides:
                    got[side].append(_measured(pid, url, n, count, client))
            b = _merge(base)
            level: dict[str, Any] = {"handle": b}
            for side, _url, _client, _pid in sides:
                merged = _merge(got[side])
                level[side] = merged
                suffix = side.removeprefix("http")
                level["ratio" + suffix] = (
                    round(merged["rate"] / b["rate"], 2) if b["rate"] else None
                )
            level["ratio_paired"] = _paired(got["http"], base)
            results["levels"][str(n)] = level
            if not args.json:
                _print_level(n, level, [side for side, *_ in sides])
        handle.shutdown()
    finally:
        serve.shutdown()
        if started:
            ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)
        if haproxy is not None:
            shutil.rmtree(haproxy, ignore_errors=True)
    return results


LABELS = {
    "http": "http",
    "http_httpx": "httpx",
    "http_unbatched": "unbatched",
    "http_proxy": "through the proxy",
}


def _print_level(n: int, level: dict[str, Any], sides: list[str]) -> None:
    b = level["handle"]
    print(
        f"{n:>3} clients  handle {b['rate']:>7.1f} tx/s (p50 {b['p50_ms']:.1f},"
        f" p99 {b['p99_ms']:.1f} ms, client CPU {b['client_cpu_ms']:.2f} ms/commit)",
        flush=True,
    )
    for side in sides:
        h = level[side]
        ratio = level["ratio" + side.removeprefix("http")]
        extra = f", paired rounds {level['ratio_paired']}" if side == "http" else ""
        replica = f", replica {h['replica_cpu_ms']:.2f}" if "replica_cpu_ms" in h else ""
        print(
            f"             {LABELS[side]:<17} {h['rate']:>7.1f} tx/s (p50 {h['p50_ms']:.1f},"
            f" p99 {h['p99_ms']:.1f} ms)  ÷ handle {ratio}{extra};"
            f"  CPU ms/commit: client {h['client_cpu_ms']:.2f}{replica}",
            flush=True,
        )


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
    parser.add_argument(
        "--commits",
        type=int,
        default=0,
        help="commits per client at 1 client (÷ clients/4 above; default 15 quick, else 60)",
    )
    parser.add_argument("--replicas", type=int, default=1, help="Serve replicas (default 1)")
    parser.add_argument(
        "--max-ongoing", type=int, default=256, help="max_ongoing_requests per replica"
    )
    parser.add_argument(
        "--client",
        choices=["raw", "httpx", "both"],
        default="raw",
        help="HTTP load client: raw (a minimal keep-alive client, default), httpx, or both"
        " (the batched app with each, same run)",
    )
    parser.add_argument(
        "--no-unbatched",
        dest="unbatched",
        action="store_false",
        help="skip the application that sends one submit per request",
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
    parser.add_argument(
        "--haproxy",
        action="store_true",
        help="RAY_SERVE_ENABLE_HA_PROXY=1: HAProxy in front of the replicas' own ports"
        " (a new local cluster only)",
    )
    args = parser.parse_args()
    if args.throughput_optimized:
        os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
    if args.direct_ingress:
        os.environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "1"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # as morphz serve: a stopping replica does not stay open 30 s for a balancer
    os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "0")
    if not args.json:
        print(f"load average (1 min): {os.getloadavg()[0]:.2f}; cpus {os.cpu_count()}")
    results = run(args)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
