"""A context actor killed mid-load (SIGKILL): acknowledged commits survive, none is doubled."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from actors import connect, lookup
from harness.agent_threads import decode_records, spawn_agent
from service.admin import export_history
from storage import LmdbStore
from tests.actors.checks import check_history, check_steps
from tests.actors.cluster import RayCluster

pytestmark = pytest.mark.ray


def test_killed_context_actor_loses_no_acknowledged_commit_and_doubles_none(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    import ray

    ctx = connect(context_name, store_dir=tmp_path, namespace=namespace)
    agent = spawn_agent(namespace=namespace)
    try:
        spec = {
            "context": context_name,
            "namespace": namespace,
            "threads": 4,
            "transactions": 30,
            "conflict_rate": 0.3,
            "seed": 11,
        }
        running = agent.run.remote(spec)
        old_pid = ctx.pid()

        async def kill_during_a_burst() -> list[Any]:
            deadline = time.monotonic() + 60
            while await ctx.version_async() < 10:
                assert time.monotonic() < deadline, "the agents made no progress"
                await asyncio.sleep(0.02)
            burst = [
                asyncio.ensure_future(
                    ctx.submit_async(
                        f"(context-tx (base-version 0) (derive driver/d{i} (i {i})))",
                        client_id=f"driver-{i}",
                    )
                )
                for i in range(40)
            ]
            await asyncio.sleep(0.005)
            os.kill(old_pid, signal.SIGKILL)
            return list(await asyncio.gather(*burst))

        burst = asyncio.run(kill_during_a_burst())
        records = decode_records(ray.get(running, timeout=120))

        # the actor came back under its name, in a new process, on the same store
        again = lookup(context_name, namespace)
        assert again.pid() != old_pid
        export = export_history(again)
        assert export["version"] == ctx.version() == len(export["log"])

        # the store's own log, read beside the running actor, says the same
        store = LmdbStore.open(tmp_path / context_name, readonly=True)
        try:
            on_disk = store.read(lambda v: [v.txlog(n) for n in range(1, v.meta().version + 1)])
        finally:
            store.close()
        assert [rec and rec["client_id"] for rec in on_disk] == [
            r["client_id"] for r in export["log"]
        ]

        # every acknowledged driver commit is in the log exactly once, at its version
        assert all(r.committed for r in burst)
        logged = {rec["client_id"]: rec["version"] for rec in export["log"]}
        assert {f"driver-{i}" for i in range(40)} <= set(logged)
        assert all(logged[r.client_id] == r.version for r in burst)
        check_history(export, records)
        check_steps(records, threads=4, transactions=30)
        # resubmitting an acknowledged transaction after the restart returns its receipt
        first = burst[0]
        replay = again.submit(
            "(context-tx (base-version 0) (derive driver/d0 (i 0)))", client_id="driver-0"
        )
        assert replay.duplicate and replay.version == first.version
    finally:
        ray.kill(agent)
        ctx.shutdown()
