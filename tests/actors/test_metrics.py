"""The context actors' metrics: counted without Ray, exported through Ray's metrics API.

The Ray test drives a known load through a context actor on the session cluster and
reads the Prometheus endpoint of the node it runs on (each node's metrics export port,
from ``ray.nodes()``) until the figures arrive: Ray exports them periodically, so it
polls with a deadline and asserts only the final values.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors import ContextActor, ContextHandle, connect, lookup
from actors.server.metrics import METRICS, NO_METRICS, PREFIX, ContextMetrics
from protocol.capabilities import PermissionDenied
from tests.actors.cluster import RayCluster
from tests.actors.local import LocalHandle

EXPORT_DEADLINE = 60.0
"""Seconds to wait for Ray to export what was recorded (it reports every few seconds)."""


def _receipt(
    status: str, *, rebased: bool = False, duplicate: bool = False, code: str = ""
) -> dict[str, Any]:
    doc: dict[str, Any] = {"status": status, "rebased": rebased, "duplicate": duplicate}
    if code:
        doc["errors"] = [{"op": 0, "code": code, "message": "x"}]
    return doc


def test_a_group_is_counted_by_outcome_without_ray() -> None:
    m = ContextMetrics("c", "ns", record=False)
    m.group(
        [
            _receipt("committed"),
            _receipt("committed", rebased=True),
            _receipt("committed", duplicate=True),
            _receipt("rejected", code="conflict"),
            _receipt("rejected", code="frame_exists"),
            RuntimeError("refused by the store"),
        ],
        0.001,
    )
    m.rejected("wire_error")
    assert not m.enabled
    assert m.totals() == {"commits": 2, "rejections": 3, "rebases": 1, "duplicates": 1}
    m.index_lag(4)
    assert m.totals()["index_lag"] == 4


def test_the_no_op_recorder_records_nothing_and_never_raises() -> None:
    NO_METRICS.latency(0.5)
    NO_METRICS.inbox_depth(3)
    NO_METRICS.denied("admin")
    assert not NO_METRICS.enabled

    async def sample() -> None:
        raise AssertionError("never sampled")

    assert NO_METRICS.start_sampler(sample) is None


def test_every_metric_is_named_typed_and_described() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for m in METRICS:
        assert m.name.startswith(PREFIX) and m.description
        assert m.kind in ("counter", "gauge", "histogram")
        assert m.tags[:2] == ("context", "namespace")
        assert (m.kind == "histogram") == bool(m.boundaries)
        assert m.kind != "counter" or m.name.endswith("_total")


def test_the_plain_actor_counts_commits_rejections_and_wire_errors(tmp_path: Path) -> None:
    async def run() -> dict[str, int]:
        actor = ContextActor(str(tmp_path), "plain")
        try:
            h = LocalHandle(actor)
            ok = await h.submit_async("(context-tx (base-version 0) (derive a (x 1)))")
            assert ok.committed
            bad = await h.submit_async("(context-tx (base-version 1) (derive a (x 2)))")
            assert bad.errors[0].code == "frame_exists"
            await actor.submit(b"\x00not a transaction")
            # one stats object, fed by the one recorder the guard and the inbox share
            assert actor.guard.metrics is actor.metrics is actor._inbox.metrics
            stats = dict(await actor.stats())
            assert stats == {
                **actor.metrics.stats.as_dict(),
                "pending": 0,
                "held_bytes": 0,  # every submission answered: no bytes in flight
                "audit_writes": 0,  # nothing was denied
            }
            return stats
        finally:
            actor.close()

    stats = asyncio.run(run())
    assert stats["commits"] == 1
    assert stats["rejections"] == 2  # frame_exists and the wire_error
    assert stats["transactions"] == 2 and stats["batches"] == 2 and stats["largest_batch"] == 1
    assert stats["wire_rejections"] == 1 and stats["held"] == 0


# -- through Ray: the Prometheus endpoint -------------------------------------------------


def _endpoint(node_id: str) -> str:
    import ray

    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node["NodeID"] == node_id and node.get("Alive"):
            return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    raise AssertionError(f"no live node {node_id}")


def _samples(url: str, context: str) -> dict[tuple[str, str], float]:
    """``(metric sample name, code-or-op tag) -> value`` of *context*, summed over workers."""
    out: dict[tuple[str, str], float] = {}
    text = httpx.get(url, timeout=5.0).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("context") != context:
                continue
            key = (s.name, s.labels.get("code") or s.labels.get("op") or "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def test_a_known_load_shows_on_the_prometheus_endpoint(
    handle: ContextHandle, ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    name = handle.name
    base = handle.version()
    for i in range(5):  # five commits, one after the other
        assert handle.submit(f"(context-tx (base-version {base + i}) (derive f{i} (n {i})))")
    rebased = handle.submit(f"(context-tx (base-version {base}) (derive g (late)))")
    assert rebased.committed and rebased.rebased
    for _ in range(3):  # three rejections with one code
        r = handle.submit(f"(context-tx (base-version {handle.version()}) (derive f0 (again)))")
        assert r.errors[0].code == "frame_exists"
    tx = f"(context-tx (base-version {handle.version()}) (derive h (once)))"
    assert handle.submit(tx, "client-once").committed
    assert handle.submit(tx, "client-once").duplicate
    assert handle.submit_payload(b"\x93garbage").errors[0].code == "wire_error"

    # an enforcing context refuses a call without a capability: one audited denial
    guarded_name = name + "-guarded"
    guarded = connect(guarded_name, store_dir=tmp_path / "b", namespace=namespace, enforce=True)
    try:
        with pytest.raises(PermissionDenied):
            lookup(guarded_name, namespace).stats()

        want = {
            (PREFIX + "commits_total", ""): 7.0,
            (PREFIX + "rebases_total", ""): 1.0,
            (PREFIX + "duplicates_total", ""): 1.0,
            (PREFIX + "rejections_total", "frame_exists"): 3.0,
            (PREFIX + "rejections_total", "wire_error"): 1.0,
        }
        want = {("ray_" + k, tag): v for (k, tag), v in want.items()}
        url = _endpoint(handle.node_id())
        deadline = time.monotonic() + EXPORT_DEADLINE
        seen: dict[tuple[str, str], float] = {}
        denials: dict[tuple[str, str], float] = {}
        while time.monotonic() < deadline:
            seen = _samples(url, name)
            denials = _samples(url, guarded_name)
            got = {k: seen.get(k) for k in want}
            latency = seen.get(("ray_" + PREFIX + "commit_latency_seconds_count", ""), 0)
            if (
                got == want
                and latency >= 11  # every submission that reached the inbox
                and denials.get(("ray_" + PREFIX + "audit_denials_total", "admin")) == 1.0
            ):
                break
            time.sleep(1.0)
        assert {k: seen.get(k) for k in want} == want, seen
        assert seen[("ray_" + PREFIX + "commit_latency_seconds_count", "")] == 11.0
        assert seen[("ray_" + PREFIX + "group_commit_size_count", "")] >= 1
        assert seen[("ray_" + PREFIX + "durable_write_seconds_count", "")] >= 1
        assert denials[("ray_" + PREFIX + "audit_denials_total", "admin")] == 1.0
        stats = handle.stats()
        assert (stats["commits"], stats["rejections"]) == (7, 4)
    finally:
        guarded.shutdown()


def test_recorded_counts_reach_ray_when_flushed_and_exactly(ray_cluster: RayCluster) -> None:
    """A write's counters and observations wait in memory until a flush (the actor's sampler
    runs one every second, closing runs one): then Ray gets the same counts, once."""
    import ray

    @ray.remote(num_cpus=0)
    class Recorder:
        def __init__(self, context: str) -> None:
            self.m = ContextMetrics(context, "metrics-flush")

        def record(self) -> bool:
            self.m.group([_receipt("committed")] * 3 + [_receipt("rejected", code="x")], 0.001)
            self.m.latency(0.002)
            self.m.latency(0.003)
            self.m.denied("admin")  # a denial is sent at once: it shows that Ray exported
            return self.m.enabled

        def flush(self) -> None:
            self.m.flush()

        def node(self) -> str:
            return str(ray.get_runtime_context().get_node_id())

    context = f"flush-{time.time_ns()}"
    recorder = Recorder.remote(context)  # type: ignore[attr-defined]
    assert ray.get(recorder.record.remote())
    url = _endpoint(ray.get(recorder.node.remote()))
    commits = ("ray_" + PREFIX + "commits_total", "")
    latency = ("ray_" + PREFIX + "commit_latency_seconds_count", "")
    deadline = time.monotonic() + EXPORT_DEADLINE
    seen: dict[tuple[str, str], float] = {}
    while time.monotonic() < deadline:
        seen = _samples(url, context)
        if ("ray_" + PREFIX + "audit_denials_total", "admin") in seen:
            break
        time.sleep(1.0)
    assert seen.get(("ray_" + PREFIX + "audit_denials_total", "admin")) == 1.0, seen
    assert commits not in seen and latency not in seen  # recorded, not flushed yet

    ray.get(recorder.flush.remote())
    ray.get(recorder.flush.remote())  # nothing new: sends nothing twice
    deadline = time.monotonic() + EXPORT_DEADLINE
    while time.monotonic() < deadline:
        seen = _samples(url, context)
        if seen.get(commits) == 3.0 and seen.get(latency) == 2.0:
            break
        time.sleep(1.0)
    assert seen.get(commits) == 3.0 and seen.get(latency) == 2.0, seen
    assert seen.get(("ray_" + PREFIX + "rejections_total", "x")) == 1.0
    assert seen.get(("ray_" + PREFIX + "group_commit_size_count", "")) == 1.0
    ray.kill(recorder)
