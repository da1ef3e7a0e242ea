"""The load test measures the runtime: one actor per thread, a same-run bare-Ray baseline,
CPU and bookkeeping per commit, pipelined threads, reads only where others write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from harness.agent_threads import AgentThread
from harness.loadtest import REPORT_KEYS, LoadAgent, check_context, run_loadtest
from harness.loadtest.baseline import process_cpu, sample_payloads, spent
from harness.loadtest.report import cost_figures
from protocol.receipts import Receipt
from protocol.tx import ContextTx
from protocol.txwire import tx_from_msgpack
from protocol.wire import unpack
from tests.actors.cluster import RayCluster
from tests.actors.local import LocalHandle


class _Counting(LocalHandle):
    """A LocalHandle that counts reads and watches the submissions in flight."""

    def __init__(self, actor: ContextActor) -> None:
        super().__init__(actor)
        self.reads = 0
        self.calls = 0
        self.flying: list[tuple[str, set[str]]] = []
        self.most = 0
        self.overlaps = 0

    async def invoke_async(self, op: Any, args: Any) -> Any:
        if op.carry is None:  # a submission is counted by submit_async
            self.calls += 1
        if op.name == "snapshot":
            self.reads += 1
        return await super().invoke_async(op, args)

    async def submit_async(
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        assert isinstance(tx, ContextTx)
        self.calls += 1
        reads, writes = tx.footprint()
        mine = (tx.reason.split()[0], {k for k in reads | writes if k.startswith("f:")})
        self.overlaps += sum(1 for t, f in self.flying if t == mine[0] and f & mine[1])
        self.flying.append(mine)
        self.most = max(self.most, len(self.flying))
        try:
            await asyncio.sleep(0.002)  # a round trip: let the other steps in flight go on
            return await super().submit_async(tx, client_id, timeout=timeout)
        finally:
            self.flying.remove(mine)


def _run(tmp_path: Path, agent: AgentThread, spec: dict[str, Any]) -> tuple[Any, ...]:
    actor = ContextActor(str(tmp_path), "ctx")
    handle = _Counting(actor)
    agent._handles[("ctx", "morphz")] = handle  # type: ignore[assignment]
    try:
        records = unpack(asyncio.run(agent.run(spec)))
        export = open_reply(asyncio.run(actor.export(0, 5000)))
    finally:
        actor.close()
    return records, export, handle


def test_a_pipelined_thread_keeps_steps_in_flight_never_two_on_one_frame(
    tmp_path: Path,
) -> None:
    spec = {"context": "ctx", "threads": 2, "transactions": 60, "pipeline": 4, "seed": 5}
    agent = AgentThread()
    records, export, handle = _run(tmp_path, agent, {**spec, "conflict_rate": 0.2})
    assert check_context(records, export).ok
    assert 2 < handle.most <= 2 * 4  # two threads, up to four steps in flight each
    assert handle.overlaps == 0  # a thread's steps on one frame waited for each other
    steps = {(r["thread"], r["step"]) for r in records}
    assert len(steps) == 120
    costs = asyncio.run(agent.costs())
    assert costs["bookkeeping_s"] > 0
    assert costs["calls"] == handle.calls > len(records)  # submissions, reads, observe steps


def test_own_frames_are_not_read_again_unless_asked(tmp_path: Path) -> None:
    spec = {"context": "ctx", "threads": 2, "transactions": 40, "conflict_rate": 0.0}
    records, export, handle = _run(tmp_path / "a", AgentThread(), {**spec, "reread_own": False})
    assert check_context(records, export).ok
    assert all(r["outcome"] == "committed" for r in records)
    # each thread reads a frame it does not know yet, at most its notes and its log
    assert 0 < handle.reads <= 2 * 5
    records, export, handle = _run(tmp_path / "b", AgentThread(), spec)
    assert check_context(records, export).ok
    assert handle.reads == 80  # re-reading before every step (the workload's default)


def test_a_pipeline_is_for_the_synthetic_workload() -> None:
    from harness.loadtest import check_options
    from protocol.errors import RequestError

    assert check_options({"threads": 2, "transactions": 4, "pipeline": 3}).pipeline == 3
    with pytest.raises(RequestError, match="pipeline"):
        check_options({"threads": 2, "transactions": 4, "pipeline": 3, "workload": "trajectories"})
    with pytest.raises(RequestError, match="pipeline"):
        check_options({"threads": 2, "transactions": 4, "pipeline": 0})


def test_costs_per_commit_and_the_sample_payloads() -> None:
    costs = {"contexts": 0.5, "agents": 2.0, "agents_loop": 1.5, "bookkeeping": 0.25}
    figures = cost_figures({**costs, "calls": 1200.0}, 1000)
    assert figures == {
        "cpu_ms_per_commit": {"contexts": 0.5, "agents": 2.0, "agents_loop": 1.5},
        "calls_per_commit": 1.2,
        "bookkeeping": {"seconds": 0.25, "ms_per_commit": 0.25, "share_of_agent_cpu": 0.125},
    }
    unknown = cost_figures({"contexts": None, "agents": 0.0, "bookkeeping": 0.0}, 0)
    assert unknown["cpu_ms_per_commit"]["contexts"] is None
    assert unknown["cpu_ms_per_commit"]["agents_loop"] is None
    assert unknown["calls_per_commit"] is None  # not counted (a trajectory replay)
    assert unknown["bookkeeping"]["share_of_agent_cpu"] is None
    assert spent({"a": 1.0, "b": None}, {"a": 3.5, "b": 2.0}) == {"a": 2.5, "b": None}
    payload, reply = sample_payloads()
    assert tx_from_msgpack(payload).ops  # a real transaction's wire form
    assert Receipt.from_dict(unpack(reply)).committed
    here = process_cpu(__import__("os").getpid())
    assert here is not None and here > 0
    assert process_cpu(2**22 + 7) is None  # no such process


def test_a_stopped_pipelined_agent_answers_its_records(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "ctx")
    agent = LoadAgent()
    agent._handles[("ctx", "morphz")] = LocalHandle(actor)  # type: ignore[assignment]
    spec = {"context": "ctx", "threads": 2, "conflict_rate": 0.0, "pipeline": 3}

    async def run_then_stop() -> bytes:
        task = asyncio.ensure_future(agent.run_for(spec, None, 1_000_000))
        while actor._ctx is None or actor._ctx.meta().version < 20:
            await asyncio.sleep(0.01)
        await agent.stop()
        return await task

    try:
        records = unpack(asyncio.run(run_then_stop()))
        export = open_reply(asyncio.run(actor.export(0, 5000)))
    finally:
        actor.close()
    assert check_context(records, export).ok
    committed = [r for r in records if r["outcome"] == "committed"]
    assert len(committed) == export["version"] >= 20
    steps = sorted(r["step"] for r in committed if r["thread"] == "t0")
    assert steps == list(range(len(steps)))  # step numbers run on across planning rounds


def test_an_agent_warms_up_with_reads_that_change_nothing(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "ctx")
    handle = _Counting(actor)
    agent = AgentThread()
    agent._handles[("ctx", "morphz")] = handle  # type: ignore[assignment]
    try:
        asyncio.run(agent.warm("ctx", "morphz", 5))
        assert handle.reads == 5 and handle.calls == 5  # reads, one after the other
        assert agent.calls == 0  # not the load's calls: calls per commit leaves them out
        assert open_reply(asyncio.run(actor.version())) == 0
        assert open_reply(asyncio.run(actor.state()))["events"] == []
    finally:
        actor.close()


@pytest.mark.ray
def test_the_baseline_and_the_costs_are_measured_in_the_same_run(
    ray_cluster: RayCluster,
    tmp_path: Path,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from morphz.cli.loadtest import _human

    doc = run_loadtest(
        {
            "address": ray_cluster.cluster.address,
            "store_dir": str(tmp_path),
            "namespace": namespace,
            "threads": 3,
            "transactions": 60,
            "conflict_rate": 0.2,
            "pipeline": 2,
            "baseline": True,
            "seed": 4,
        }
    )
    assert tuple(doc) == REPORT_KEYS
    assert doc["history_ok"], doc["violations"]
    assert doc["agents"] == 3 and doc["pipeline"] == 2 and doc["steps"] == 60
    base = doc["baseline"]
    assert base["clients"] == 3 and base["lanes"] == 3 and base["calls"] == 60
    assert base["calls_s"] > 0 and base["latency_ms"]["p99"] >= base["latency_ms"]["p50"] > 0
    assert base["cpu_ms_per_call"]["clients"] > 0
    assert doc["ratio_to_baseline"] == round(doc["throughput_tx_s"] / base["calls_s"], 3)
    cpu = doc["cpu_ms_per_commit"]
    assert cpu["agents"] > cpu["agents_loop"] > 0  # the loop is one of the agents' threads
    assert base["cpu_ms_per_call"]["clients"] > base["cpu_ms_per_call"]["clients_loop"] > 0
    # every step submits at least once; observe steps observe and claim too
    assert doc["calls_per_commit"] >= doc["submitted"] / doc["committed"]
    assert doc["bookkeeping"]["seconds"] > 0
    _human(doc)
    out = capsys.readouterr().out
    assert "bare Ray baseline" in out and "commits / baseline" in out and "CPU per commit" in out
