"""The load test's same-run yardstick: bare Ray clients calling one no-op actor.

``--baseline`` measures, on the cluster the load runs on and just before it,
what Ray alone carries: as many client actors as the load has agent actors,
each calling one bare async actor (the context actor's options: no CPU,
``max_concurrency`` 1000, on the first context's node) one call after the
other, with a transaction-sized msgpack payload out and a receipt-sized one
back, for as many calls in all as the load's transactions (or for the load's
duration). Its calls/s is what the load's commits/s is held against
(``ratio``); the CPU seconds per call of the no-op actor and of the clients sit
beside the load's CPU per commit of the context actors and of the agents, which
:func:`load_costs` samples before and after the load.

Ray is imported inside the functions that use it, never at module import.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from actors.client.handle import ContextHandle
from harness.loadtest.report import percentile
from harness.workload import Step, build_tx
from protocol.errors import MorphzError
from protocol.receipts import Receipt
from protocol.txwire import tx_to_msgpack
from protocol.wire import pack

__all__ = [
    "BaselineClient",
    "Echo",
    "load_costs",
    "measure_baseline",
    "process_cpu",
    "sample_payloads",
    "spent",
]

WARM_CALLS = 20
"""Calls each client makes before the clock starts (connections and code paths warm)."""


def sample_payloads() -> tuple[bytes, bytes]:
    """A transaction's wire payload (a note step of the synthetic workload) and a
    committed receipt's reply, as the load sends and receives them."""
    step = Step("t0", 0, "note", "t0/note-0")
    tx = build_tx(step, {}, 0, "c" * 32)
    receipt = Receipt(status="committed", version=1, base_version=0, client_id="c" * 32, tick=1)
    return tx_to_msgpack(tx), pack(receipt.to_dict())


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user and system) process *pid* used so far, from ``/proc``; None if
    it cannot be read (another machine, no procfs)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15)


class Echo:
    """The bare actor: answers *reply* to every call, at once."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply

    async def noop(self, payload: bytes) -> bytes:
        """Answer the fixed reply (the payload is received, not read)."""
        return self.reply

    def cpu(self) -> float:
        """CPU seconds this process used so far."""
        return time.process_time()


class BaselineClient:
    """One bare client actor: *lanes* callers (asyncio tasks), each calling the echo actor
    one call after the other, as the agent threads an agent actor hosts do."""

    async def run(
        self, echo: Any, payload: bytes, lanes: list[int | None], seconds: float | None
    ) -> dict[str, Any]:
        """Lane *i* makes ``lanes[i]`` calls (None: calls for *seconds*); their latencies
        (ms), this process's CPU seconds over them and its event loop's (``loop_cpu_s``)."""
        for _ in range(WARM_CALLS):
            await echo.noop.remote(payload)
        cpu, loop_cpu = time.process_time(), time.thread_time()
        started = time.perf_counter()
        deadline = None if seconds is None else started + seconds
        latencies: list[float] = []

        async def lane(calls: int | None) -> None:
            made = 0
            while (calls is None or made < calls) and (
                deadline is None or time.perf_counter() < deadline
            ):
                t = time.perf_counter()
                await echo.noop.remote(payload)
                latencies.append((time.perf_counter() - t) * 1000)
                made += 1

        await asyncio.gather(*(lane(n) for n in lanes))
        return {
            "latencies": latencies,
            "seconds": time.perf_counter() - started,
            "cpu_s": time.process_time() - cpu,
            "loop_cpu_s": time.thread_time() - loop_cpu,
        }

    def ready(self) -> bool:
        """True (the actor is up)."""
        return True


def measure_baseline(
    layout: list[list[int | None]],
    *,
    seconds: float | None,
    server_node: str,
    client_nodes: list[str],
    namespace: str,
) -> dict[str, Any]:
    """Bare Ray throughput with one client actor per entry of *layout* (see the module
    docstring).

    ``layout[j]`` lists client *j*'s lanes, each its number of calls (None: calls for
    *seconds*), as the load's agent *j* hosts threads with their steps; the no-op actor
    on *server_node*, client *j* on ``client_nodes[j % len]``. Answers ``clients``,
    ``lanes``, ``calls``, ``duration_s``, ``calls_s``, ``latency_ms`` (p50/p99) and
    ``cpu_ms_per_call`` of the ``server`` (None when its process is on
    another machine), of the ``clients`` together and of their event loops
    (``clients_loop``: the thread their callers' Python runs on).
    """
    import ray

    from actors.client.nodes import pinned

    payload, reply = sample_payloads()
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000, "namespace": namespace}
    echo: Any = ray.remote(Echo).options(**options, scheduling_strategy=pinned(server_node))
    server: Any = echo.remote(reply)
    client_cls: Any = ray.remote(BaselineClient)
    clients = len(layout)
    actors: list[Any] = [
        client_cls.options(
            **options, scheduling_strategy=pinned(client_nodes[j % len(client_nodes)])
        ).remote()
        for j in range(clients)
    ]
    try:
        ray.get([a.ready.remote() for a in actors] + [server.cpu.remote()])
        server_cpu: float = ray.get(server.cpu.remote())
        started = time.perf_counter()
        runs = ray.get(
            [
                a.run.remote(server, payload, lanes, seconds)
                for a, lanes in zip(actors, layout, strict=True)
            ]
        )
        elapsed = time.perf_counter() - started
        server_cpu = ray.get(server.cpu.remote()) - server_cpu
    finally:
        for a in [*actors, server]:
            ray.kill(a)
    latencies = [x for r in runs for x in r["latencies"]]
    done = len(latencies)
    # The clients run their warm-up before their clocks start: the rate is over the
    # slowest client's timed run, so that warm-up is not counted.
    timed = max((r["seconds"] for r in runs), default=elapsed)
    return {
        "clients": clients,
        "lanes": sum(len(lanes) for lanes in layout),
        "calls": done,
        "duration_s": round(timed, 3),
        "calls_s": round(done / timed, 1) if timed > 0 else 0.0,
        "latency_ms": {
            "p50": round(percentile(latencies, 50), 2),
            "p99": round(percentile(latencies, 99), 2),
        },
        "cpu_ms_per_call": {
            # the server's CPU also served the clients' warm-up calls
            "server": round(server_cpu * 1000 / max(1, done + WARM_CALLS * clients), 3),
            "clients": round(sum(r["cpu_s"] for r in runs) * 1000 / max(1, done), 3),
            "clients_loop": round(sum(r["loop_cpu_s"] for r in runs) * 1000 / max(1, done), 3),
        },
        "payload_bytes": len(payload),
        "reply_bytes": len(reply),
    }


def load_costs(
    handles: list[ContextHandle], nodes: list[str], local: set[str], agents: list[Any]
) -> dict[str, float | None]:
    """CPU seconds so far of the context actors' processes (``contexts``; None when one
    is on another machine or cannot be asked; a process hosting several contexts counted
    once), of the *agents* (``agents``) and of their event loops (``agents_loop``), the
    agents' ``bookkeeping`` CPU seconds and the remote ``calls`` their threads made."""
    import ray

    contexts: float | None = 0.0
    pids: set[int] = set()
    for handle, node in zip(handles, nodes, strict=True):
        try:
            pid = handle.pid() if node in local else None
        except MorphzError:
            pid = None
        cpu = None if pid is None else (0.0 if pid in pids else process_cpu(pid))
        if pid is not None:
            pids.add(pid)
        contexts = None if contexts is None or cpu is None else contexts + cpu
    got = ray.get([a.costs.remote() for a in agents])
    return {
        "contexts": contexts,
        "agents": sum(a["cpu_s"] for a in got),
        "agents_loop": sum(a["loop_cpu_s"] for a in got),
        "bookkeeping": sum(a["bookkeeping_s"] for a in got),
        "calls": sum(a["calls"] for a in got),
    }


def spent(
    before: dict[str, float | None], after: dict[str, float | None]
) -> dict[str, float | None]:
    """What each figure of :func:`load_costs` grew by (None where either is None)."""
    out: dict[str, float | None] = {}
    for key, end in after.items():
        start = before.get(key)
        out[key] = None if start is None or end is None else max(0.0, end - start)
    return out
