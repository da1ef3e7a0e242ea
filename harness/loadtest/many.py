"""Many contexts on context hosts: thousands known, most idle, a hot set under load.

``morphz loadtest --hosts K --contexts N --threads T`` runs :func:`run_many`:
``N`` contexts placed through the context directory over ``K`` context hosts
(:mod:`actors.server.hosting`) on this node, created, then left to go idle
(deactivated after ``idle_after`` seconds); then ``T`` committers, each working
on one context at a time and moving to another, random one every
``switch_every`` seconds, so about ``T`` contexts are active at any moment and
the others are activated when a committer arrives and deactivated after it
leaves. Every committed, rejected or unknown submission is recorded with its
client id, and every context touched is checked afterwards against its log
(:func:`harness.loadtest.checks.check_context`): no lost or duplicated commit
across the activations and deactivations.

The report: contexts, hosts, commits and commits/s, commit latency, the hosts'
activations and deactivations, activation latency (host side, p50 / p99), the
hosts' resident memory per idle context (all known, none active) and per
active context (sampled under load), and the history verdict with
``cycles_checked``: the deactivate/activate cycles the checked contexts went
through during the run (each activation of a context after its first).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from actors.client.handle import ContextHandle
from actors.client.joining import ray_module
from actors.client.names import host_actor
from harness.loadtest.checks import CHECK_RETRY, check_context
from harness.loadtest.report import percentile
from protocol.errors import MorphzError
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive
from service.admin import export_history

HOST_REPORT_WAIT = 20.0
"""Seconds the run waits for its hosts' first load reports to reach the directory."""
CREATE_CHUNK = 256
"""Contexts created at once (activation calls in flight)."""

__all__ = ["HotLoader", "check_many_options", "run_many"]


def check_many_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The hosted run's options with defaults; ValueError on a bad one."""
    o = {
        "contexts": 1000,
        "hosts": 4,
        "threads": 100,
        "duration_s": 10.0,
        "idle_after_s": 2.0,
        "switch_every_s": 1.0,
        "seed": 0,
        "store_dir": None,
        "keep": False,
        **{k: v for k, v in options.items() if v is not None},
    }
    for key, low in (("contexts", 1), ("hosts", 1), ("threads", 1)):
        if not isinstance(o[key], int) or o[key] < low:
            raise ValueError(f"{key} must be an integer >= {low}")
    for key in ("duration_s", "idle_after_s", "switch_every_s"):
        if not isinstance(o[key], (int, float)) or o[key] <= 0:
            raise ValueError(f"{key} must be a positive number of seconds")
    return o


def _tx(frame: str) -> ContextTx:
    return ContextTx(base_version=0, reason="many", ops=(Derive(id=frame, body=((Symbol("n"),),)),))


class HotLoader:
    """Committers that wander over many hosted contexts (runs as a Ray actor)."""

    def ping(self) -> int:
        return os.getpid()

    async def run(
        self,
        contexts: list[tuple[str, str]],
        hosts: dict[str, Any],
        namespace: str,
        committers: list[int],
        seconds: float,
        switch_every: float,
        seed: int,
    ) -> list[dict[str, Any]]:
        """Records of *committers* (their numbers) submitting for *seconds*; each picks a
        random context of *contexts* (name, host actor name) every *switch_every* s."""
        handles: dict[str, ContextHandle] = {}

        def handle(name: str, host: str) -> ContextHandle:
            h = handles.get(name)
            if h is None:
                h = handles[name] = ContextHandle(
                    hosts[host], name, namespace=namespace, ray_name=host
                )
            return h

        records: list[dict[str, Any]] = []
        deadline = time.perf_counter() + seconds

        async def committer(k: int) -> None:
            rng = random.Random(seed * 100_003 + k)
            i = 0
            while time.perf_counter() < deadline:
                name, host = contexts[rng.randrange(len(contexts))]
                h = handle(name, host)
                leave = min(deadline, time.perf_counter() + switch_every)
                first = True
                while time.perf_counter() < leave:
                    tx = _tx(f"c{k}/n{i}")
                    cid = f"c-{seed}-{k}-{i}"
                    reads, writes = tx.footprint()
                    record: dict[str, Any] = {
                        "context": name,
                        "client_id": cid,
                        "thread": f"t{k}",
                        "base_version": 0,
                        "footprint": sorted(reads | writes),
                        "first": first,  # the first call after arriving: it may activate
                    }
                    first = False
                    t = time.perf_counter()
                    try:
                        r = await h.submit_async(tx, cid)
                        record.update(
                            outcome="committed" if r.committed else "rejected",
                            version=r.version,
                            duplicate=r.duplicate,
                            error_code=r.errors[0].code if r.errors else None,
                        )
                    except MorphzError as e:
                        record.update(outcome="unknown", version=None, error_code=e.code)
                    record["latency_ms"] = (time.perf_counter() - t) * 1000
                    records.append(record)
                    i += 1

        await asyncio.gather(*(committer(k) for k in committers))
        return records


def _hosts_load(hosts: list[Any]) -> list[dict[str, Any]]:
    ray = ray_module()
    return [dict(x) for x in ray.get([h.actor.load.remote() for h in hosts])]


def run_many(
    options: Mapping[str, Any], progress: Callable[[Mapping[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run the hosted load test (see the module doc) and answer its report."""
    from actors.cluster.directory_handle import directory
    from actors.server.hosting import start_host

    o = check_many_options(options)
    ray = ray_module()
    run_id = uuid.uuid4().hex[:8]
    namespace = f"morphz-many-{run_id}"
    root = o["store_dir"] or tempfile.mkdtemp(prefix="morphz-many-")
    os.makedirs(root, exist_ok=True)
    say = progress or (lambda p: None)
    d = directory(namespace)
    hosts = [
        start_host(
            f"h{i}", store_dir=root, namespace=namespace, idle_after=float(o["idle_after_s"])
        )
        for i in range(o["hosts"])
    ]
    names = [f"many-{i}" for i in range(o["contexts"])]
    try:
        base = _hosts_load(hosts)
        say({"phase": f"waiting for {len(hosts)} hosts to report"})
        deadline = time.monotonic() + HOST_REPORT_WAIT
        while len(d.hosts()) < len(hosts):
            if time.monotonic() > deadline:
                raise RuntimeError("the context hosts did not report to the directory")
            time.sleep(0.2)
        say({"phase": f"placing {len(names)} contexts"})
        started = time.perf_counter()
        placed = [(n, d.place_hosted(n).primary.actor) for n in names]
        place_s = time.perf_counter() - started
        by_actor = {host_actor(h.name): h for h in hosts}
        say({"phase": f"creating {len(names)} contexts"})
        started = time.perf_counter()
        for k in range(0, len(placed), CREATE_CHUNK):
            refs = [
                by_actor[a].actor.activate.remote(n, {"create": True})
                for n, a in placed[k : k + CREATE_CHUNK]
            ]
            for info in ray.get(refs):
                if info["open_error"] is not None:
                    raise RuntimeError(f"cannot create a context: {info['open_error']}")
        create_s = time.perf_counter() - started
        say({"phase": "waiting for every context to go idle"})
        deadline = time.monotonic() + 10 * float(o["idle_after_s"]) + 30
        while any(x["active"] for x in _hosts_load(hosts)) and time.monotonic() < deadline:
            time.sleep(0.2)
        idle = _hosts_load(hosts)
        say({"phase": f"{o['threads']} committers over {len(names)} contexts"})
        loaders = [
            ray.remote(HotLoader).options(num_cpus=0, max_concurrency=100).remote()
            for _ in range(min(2, o["threads"]))
        ]
        ray.get([ld.ping.remote() for ld in loaders])  # their processes run before the clock
        ks = list(range(o["threads"]))
        actors = {a: h.actor for a, h in by_actor.items()}
        started = time.perf_counter()
        refs = [
            ld.run.remote(
                placed,
                actors,
                namespace,
                ks[j :: len(loaders)],
                float(o["duration_s"]),
                float(o["switch_every_s"]),
                int(o["seed"]),
            )
            for j, ld in enumerate(loaders)
        ]
        samples: list[list[dict[str, Any]]] = []
        while True:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
            if len(ready) == len(refs):
                break
            samples.append(_hosts_load(hosts))
        records = [r for part in ray.get(refs) for r in part]
        seconds = time.perf_counter() - started
        after = _hosts_load(hosts)
        served = {
            c["name"]: int(c["activations"])
            for part in ray.get([h.actor.contexts.remote() for h in hosts])
            for c in part
        }
        say({"phase": "checking histories"})
        verdicts = _check(records, placed, actors, namespace)
        # each activation after a context's first follows a deactivation: one cycle
        verdicts["cycles"] = sum(max(0, served.get(n, 1) - 1) for n in verdicts["names"])
        return _report(o, run_id, records, seconds, base, idle, samples, after, verdicts) | {
            "placement_s": round(place_s, 2),
            "creation_s": round(create_s, 2),
        }
    finally:
        if not o["keep"]:
            for h in hosts:
                try:
                    h.shutdown()
                except Exception:  # already gone
                    pass
            for n in names:
                try:
                    d.remove(n)
                except MorphzError:
                    pass
            if o["store_dir"] is None:
                shutil.rmtree(root, ignore_errors=True)


def _check(
    records: list[dict[str, Any]],
    placed: list[tuple[str, str]],
    actors: dict[str, Any],
    namespace: str,
) -> dict[str, Any]:
    """Each touched context's records against its export (activating it once more)."""
    where = dict(placed)
    by_context: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_context.setdefault(r["context"], []).append(r)
    bad: dict[str, list[str]] = {}
    for name, recs in sorted(by_context.items()):
        h = ContextHandle(
            actors[where[name]], name, namespace=namespace, ray_name=where[name], retry=CHECK_RETRY
        )
        verdict = check_context(recs, export_history(h))
        if not verdict.ok:
            bad[name] = sorted(verdict.kinds())
    return {"checked": len(by_context), "names": sorted(by_context), "violations": bad}


def _report(
    o: Mapping[str, Any],
    run_id: str,
    records: list[dict[str, Any]],
    seconds: float,
    base: list[dict[str, Any]],
    idle: list[dict[str, Any]],
    samples: list[list[dict[str, Any]]],
    after: list[dict[str, Any]],
    verdicts: dict[str, Any],
) -> dict[str, Any]:
    committed = sum(1 for r in records if r["outcome"] == "committed")
    latencies = [r["latency_ms"] for r in records]
    mb = float(1 << 20)
    base_rss = sum(x["rss"] for x in base)
    idle_rss = sum(x["rss"] for x in idle)
    active_per: list[float] = []
    for sample in samples:
        active = sum(x["active"] for x in sample)
        if active:
            active_per.append((sum(x["rss"] for x in sample) - idle_rss) / active / mb)
    per_active = sorted(active_per)[len(active_per) // 2] if active_per else None
    if per_active is not None and per_active < 0:  # the hot set fit in what creation left
        per_active = 0.0
    p50s = [x["activation_p50_ms"] for x in after if x["activation_p50_ms"] is not None]
    p99s = [x["activation_p99_ms"] for x in after if x["activation_p99_ms"] is not None]
    return {
        "run_id": run_id,
        "mode": "hosted",
        "contexts": o["contexts"],
        "hosts": o["hosts"],
        "threads": o["threads"],
        "idle_after_s": o["idle_after_s"],
        "switch_every_s": o["switch_every_s"],
        "seconds": round(seconds, 2),
        "submitted": len(records),
        "committed": committed,
        "unknown": sum(1 for r in records if r["outcome"] == "unknown"),
        "commits_per_s": round(committed / seconds, 1) if seconds else 0.0,
        "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)},
        "activations": sum(x["activations"] for x in after),
        "deactivations": sum(x["deactivations"] for x in after),
        "refused": sum(x["refused"] for x in after),
        "first_call_ms": {
            "p50": percentile([r["latency_ms"] for r in records if r["first"]], 50),
            "p99": percentile([r["latency_ms"] for r in records if r["first"]], 99),
        },
        "activation_ms": {
            "p50": round(sorted(p50s)[len(p50s) // 2], 2) if p50s else None,
            "p99_worst_host": round(max(p99s), 2) if p99s else None,
        },
        "active_max": max((sum(x["active"] for x in s) for s in samples), default=0),
        "memory_mb": {
            "hosts_base": round(base_rss / mb, 1),
            "hosts_all_idle": round(idle_rss / mb, 1),
            "hosts_after": round(sum(x["rss"] for x in after) / mb, 1),
            "per_idle_context": round((idle_rss - base_rss) / o["contexts"] / mb, 3),
            "per_active_context": None if per_active is None else round(per_active, 3),
            "hosts_under_load": round(
                sorted(sum(x["rss"] for x in s) for s in samples)[len(samples) // 2] / mb, 1
            )
            if samples
            else None,
        },
        "contexts_checked": verdicts["checked"],
        "cycles_checked": verdicts["cycles"],
        "violations": verdicts["violations"],
        "history_ok": not verdicts["violations"],
    }
