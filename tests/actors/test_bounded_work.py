"""Bounded work in the context actor, through Ray: a call over its byte budget is refused
whole with ``overloaded`` before anything of it is decoded, and a flood of refused calls
costs a handful of durable audit writes while every refusal is still counted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from actors import ContextHandle, connect
from actors.client.names import actor_name
from actors.client.replies import raise_error
from actors.server.guard import issue_capability
from actors.server.intake import MAX_CALL_BYTES
from protocol.capabilities import PermissionDenied
from protocol.errors import Overloaded
from protocol.wire import unpack
from tests.actors.cluster import RayCluster

pytestmark = pytest.mark.ray


def test_a_call_over_its_byte_budget_is_overloaded_and_decides_nothing(
    handle: ContextHandle, context_name: str, namespace: str
) -> None:
    import ray

    actor = ray.get_actor(actor_name(context_name), namespace=namespace)
    before, version = handle.stats(), handle.version()
    chunk = b"\x01" * (MAX_CALL_BYTES // 3 + 1)  # three of them: just over one call's budget
    raw: Any = ray.get(actor.submit_many.remote([chunk, chunk, chunk]))
    reply = unpack(raw)
    assert reply["error"]["code"] == "overloaded" and reply["error"]["type"] == "Overloaded"
    with pytest.raises(Overloaded):  # what a handle raises for it
        raise_error(reply["error"])
    after = handle.stats()
    assert after["wire_rejections"] == before["wire_rejections"]  # not even decoded
    assert after["held_bytes"] == 0 and handle.version() == version
    # under the budget the same bytes are decided (here: rejected as not a transaction)
    replies: Any = ray.get(actor.submit_many.remote([chunk, chunk]))
    assert [unpack(r)["errors"][0]["code"] for r in replies] == ["wire_error", "wire_error"]
    assert handle.stats()["held_bytes"] == 0 and handle.version() == version


def test_a_flood_of_denials_is_counted_in_a_few_durable_writes(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    h = connect(context_name, store_dir=tmp_path, namespace=namespace, tenant="acme", enforce=True)
    admin = issue_capability(
        tmp_path, holder="ops", tenant="acme", grants=[("*", ["read", "admin"])]
    )
    try:
        flood = 120
        for _ in range(flood):
            with pytest.raises(PermissionDenied):
                h.version()  # no token
        ops = h.with_capability(admin)
        deadline = time.monotonic() + 60
        while True:  # the deferred denials land in their batch
            rows = [e for e in ops.audit(0, 1000) if e.get("method") == "version"]
            counted = sum(int(e.get("count", 1)) for e in rows)
            if counted >= flood or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert counted == flood  # every refusal is in the log
        writes = ops.stats()["audit_writes"]
        assert writes <= flood // 4, writes  # not one fsync per refusal
        assert h.with_capability(admin).version() == 0  # nothing else happened
    finally:
        h.shutdown()


def test_a_batch_of_big_transactions_is_cut_to_the_call_budget(handle: ContextHandle) -> None:
    """The HTTP replica's batcher groups transactions into submit_many calls: a crowd of big
    ones goes in calls within one call's byte budget, each decided, none refused whole."""
    import asyncio

    from actors.client.batching import SubmitBatcher

    batcher = SubmitBatcher(handle.transport)
    chunk = b"\x01" * (MAX_CALL_BYTES // 3 + 1)

    async def crowd() -> list[Any]:
        return list(await asyncio.gather(*(batcher.submit(chunk) for _ in range(3))))

    receipts = asyncio.run(crowd())
    assert [r.errors[0].code for r in receipts] == ["wire_error"] * 3  # decided, not overloaded
    assert batcher.calls == 2 and handle.stats()["held_bytes"] == 0
