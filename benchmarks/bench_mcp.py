"""MCP ``commit`` round trips through ``morphz mcp`` (stdio, streamable HTTP), beside a Ray handle.

Measured in one run, against one context actor on one Ray cluster (a new
local one unless ``--address``):

* **baseline**: ``ContextHandle.submit`` from this process, straight to the
  context actor (one caller, one commit at a time);
* **stdio**: the MCP SDK's client calling the ``commit`` tool of a ``morphz
  mcp`` child process spawned over stdio (as a desktop host spawns it), which
  submits through the same actor (it joins the cluster by ``RAY_ADDRESS``);
* **HTTP**: the same over streamable HTTP, ``morphz mcp --http`` on loopback.

Each caller revises a frame of its own on the version its last receipt gave
(nothing conflicts; later ones are rebased), one call at a time, and the
latency of every call is kept: p50/p99 and calls/s for each port, and the
ratio of each port's p50 to the baseline's. The three are interleaved in
rounds so load drift hits all of them. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import testbed  # first: puts this checkout on sys.path

from actors.server.connect import connect
from harness.loadtest import percentile

NAMESPACE = "morphz-bench"


def _tx(frame: str, exists: bool, base: int, i: int) -> str:
    op = "revise" if exists else "derive"
    return f"(context-tx (base-version {base}) ({op} {frame} (step {i}) (status tests-passed)))"


def _summary(latencies: list[float]) -> dict[str, Any]:
    total = sum(latencies)
    return {
        "count": len(latencies),
        "rate": round(len(latencies) / total, 1) if total else 0.0,
        "p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 99) * 1000, 3),
    }


def _env(address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MORPHZ_STORE"}
    env["RAY_ADDRESS"] = address
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"morphz mcp --http exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("morphz mcp --http did not start listening") from None
            time.sleep(0.1)


class Caller:
    """One port's commits: its own frame, its last version, its latencies."""

    def __init__(self, name: str, submit: Callable[[str], Awaitable[dict[str, Any]]]) -> None:
        self.name = name
        self.submit = submit
        self.frame = f"bench/{name}"
        self.exists = False
        self.base = 0
        self.i = 0
        self.latencies: list[float] = []

    async def commit(self, keep: bool) -> None:
        text = _tx(self.frame, self.exists, self.base, self.i)
        start = time.perf_counter()
        receipt = await self.submit(text)
        elapsed = time.perf_counter() - start
        if receipt.get("status") != "committed":
            raise SystemExit(f"{self.name}: a benchmark commit was not committed: {receipt}")
        self.exists, self.base, self.i = True, int(receipt["version"]), self.i + 1
        if keep:
            self.latencies.append(elapsed)


async def _measure(args: argparse.Namespace, address: str, store: str, name: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    handle = connect(name, store_dir=store, namespace=NAMESPACE)
    rounds, per_round = (3, 30) if args.quick else (10, 100)
    warmup = 10
    cli = [sys.executable, "-m", "morphz.cli", "--store", store, "--context", name, "mcp"]
    port = _free_port()
    http = subprocess.Popen(
        [*cli, "--http", f"127.0.0.1:{port}"],
        env=_env(address),
        cwd=str(testbed.ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(http, port)
        stdio = StdioServerParameters(
            command=cli[0], args=cli[1:], env=_env(address), cwd=str(testbed.ROOT)
        )
        async with (
            Client(stdio, read_timeout_seconds=120) as over_stdio,
            Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as over_http,
        ):

            async def direct(text: str) -> dict[str, Any]:
                return dict((await handle.submit_async(text)).to_dict())

            def tool(client: Client) -> Callable[[str], Awaitable[dict[str, Any]]]:
                async def call(text: str) -> dict[str, Any]:
                    result = await client.call_tool("commit", {"tx": text})
                    if result.structured_content is None:
                        raise SystemExit(f"commit tool failed: {result.content}")
                    return dict(result.structured_content)

                return call

            callers = [
                Caller("handle", direct),
                Caller("stdio", tool(over_stdio)),
                Caller("http", tool(over_http)),
            ]
            for c in callers:
                for _ in range(warmup):
                    await c.commit(keep=False)
            for _ in range(rounds):
                for c in callers:
                    for _ in range(per_round):
                        await c.commit(keep=True)
    finally:
        http.terminate()
        try:
            http.wait(timeout=20)
        except subprocess.TimeoutExpired:
            http.kill()
        handle.shutdown()
    figures = {c.name: _summary(c.latencies) for c in callers}
    base = figures["handle"]["p50_ms"]
    for port_name in ("stdio", "http"):
        figures[port_name]["p50_vs_handle"] = testbed.ratio(figures[port_name]["p50_ms"], base)
        figures[port_name]["overhead_p50_ms"] = round(figures[port_name]["p50_ms"] - base, 3)
    return {"rounds": rounds, "per_round": per_round, **figures}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start (or join) Ray, measure the three ports, stop; the figures."""
    import logging

    import anyio
    import ray

    ray.init(
        address=args.address or "local",
        log_to_driver=False,
        logging_level=logging.WARNING,
        **({} if args.address else {"include_dashboard": False}),
    )
    address = ray.get_runtime_context().gcs_address
    store = tempfile.mkdtemp(prefix="morphz-bench-mcp-", dir=args.dir or testbed.scratch_parent())
    report: dict[str, Any] = {"machine": testbed.machine(store), "ray": ray.__version__}
    try:
        report["commit"] = anyio.run(_measure, args, address, store, f"mcp-{uuid.uuid4().hex[:8]}")
    finally:
        ray.shutdown()
        shutil.rmtree(store, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document of figures")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a new local one)")
    parser.add_argument("--dir", default=None, help="scratch parent directory for the store")
    args = parser.parse_args()
    report = run(args)
    if args.json:
        print(json.dumps(report))
        return
    c = report["commit"]
    print(f"bench_mcp: {testbed.describe(report['machine'])}, Ray {report['ray']}")
    print(
        f"commit round trip, one caller at a time, {c['rounds']} interleaved rounds"
        f" x {c['per_round']} per port"
    )
    print(f"{'port':<26}{'calls/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'p50 / handle':>14}")
    names = {
        "handle": "Ray handle submit (base)",
        "stdio": "MCP over stdio",
        "http": "MCP over HTTP",
    }
    for key, label in names.items():
        f = c[key]
        ratio = f"{f['p50_vs_handle']:.2f}x" if "p50_vs_handle" in f else "1.00x"
        print(f"{label:<26}{f['rate']:>10.1f}{f['p50_ms']:>10.2f}{f['p99_ms']:>10.2f}{ratio:>14}")


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
