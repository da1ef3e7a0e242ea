"""The synthetic workload and the agent thread's retry policy, without Ray."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from harness.agent_threads import RECORD_KEYS, AgentThread, check_spec
from harness.workload import (
    WorkloadSpec,
    build_tx,
    footprint_keys,
    plan_thread,
    shared_frames,
    written_frames,
)
from protocol.errors import RequestError
from protocol.tx import ContextTx, Derive, Relate, Retire, Revise
from protocol.txwire import tx_from_msgpack, tx_to_msgpack
from protocol.wire import unpack
from tests.actors.local import LocalHandle


def test_plans_are_reproducible_and_differ_per_thread() -> None:
    spec = WorkloadSpec(context="c", transactions=100, conflict_rate=0.3, observe_rate=0.2, seed=7)
    assert plan_thread(spec, 3) == plan_thread(spec, 3)
    assert plan_thread(spec, 3) != plan_thread(spec, 4)
    assert plan_thread(spec, 3) != plan_thread(spec.model_copy(update={"seed": 8}), 3)
    kinds = Counter(step.kind for step in plan_thread(spec, 3))
    assert set(kinds) == {"note", "relate", "shared", "observe"}


def test_conflict_rate_decides_who_touches_shared_frames() -> None:
    alone = WorkloadSpec(context="c", transactions=40, conflict_rate=0.0)
    assert all(not s.target.startswith("shared/") for s in plan_thread(alone, 0))
    assert all(s.target.startswith("t0/") for s in plan_thread(alone, 0))
    together = WorkloadSpec(context="c", transactions=40, conflict_rate=1.0, shared_plans=3)
    steps = plan_thread(together, 5)
    assert {s.kind for s in steps} == {"shared"}
    assert {s.target for s in steps} <= set(shared_frames(together))
    assert shared_frames(together) == (
        "shared/release",
        "shared/plan-0",
        "shared/plan-1",
        "shared/plan-2",
    )


def test_build_tx_derives_first_and_revises_afterwards() -> None:
    spec = WorkloadSpec(context="c", transactions=30, conflict_rate=0.5, seed=1)
    for step in plan_thread(spec, 2):
        first = build_tx(step, {}, 4, "c-1", event_ref="@e9")
        assert first.base_version == 4 and first.client_id == "c-1"
        assert isinstance(first.ops[0], Derive)
        known = dict.fromkeys(step.frames(), True)
        later = build_tx(step, known, 5, "c-2", event_ref="@e9")
        if step.kind == "relate":
            assert [type(op) for op in later.ops] == [Relate]
        else:
            assert isinstance(later.ops[0], Revise)
        if step.kind == "observe":
            assert isinstance(later.ops[0], Revise) and later.ops[0].sources == ("@e9",)
            assert later.ops[-1] == Retire(refs=("@e9",))
        if step.kind == "shared":
            assert step.other is not None
            assert later.ops[-1] == Relate(subject=step.other, label="supports", object=step.target)
        assert set(written_frames(later)) <= set(step.frames())
        assert footprint_keys(later) == sorted(set(footprint_keys(later)))
        assert f"f:{step.target}" in footprint_keys(later)


def test_built_transactions_are_what_the_checked_models_make_of_them() -> None:
    # build_tx skips the models' validators: each kind of step, with its frames known
    # or not, must give exactly the transaction the validating constructors give, on
    # the wire too (the context actor decodes it as the checked model)
    spec = WorkloadSpec(context="c", transactions=200, conflict_rate=0.3, observe_rate=0.2)
    steps = plan_thread(spec, 1)
    assert {s.kind for s in steps} == {"note", "relate", "shared", "observe"}
    for step in steps:
        for exists in (False, True):
            known = dict.fromkeys(step.frames(), exists)
            if len(step.frames()) == 2:
                known[step.frames()[1]] = not exists
            tx = build_tx(step, known, 3, "c-7", event_ref="@e2")
            checked = ContextTx.model_validate(tx.model_dump())
            assert tx == checked
            assert tx_from_msgpack(tx_to_msgpack(tx)) == checked
            assert footprint_keys(tx) == footprint_keys(checked)


def test_observe_steps_need_their_event() -> None:
    spec = WorkloadSpec(context="c", transactions=40, observe_rate=1.0, conflict_rate=0)
    step = plan_thread(spec, 0)[0]
    with pytest.raises(ValueError):
        build_tx(step, {}, 0, "c-1")


def test_specs_are_checked() -> None:
    assert check_spec({"context": "c"}).threads == 1
    with pytest.raises(RequestError, match="conflict_rate") as info:
        check_spec({"context": "c", "conflict_rate": 2})
    assert info.value.code == "bad_spec"
    with pytest.raises(RequestError, match="surprise"):
        check_spec({"context": "c", "surprise": 1})


def run_local(tmp_path: Path, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    actor = ContextActor(str(tmp_path), "ctx")
    agent = AgentThread()
    agent._handles[("ctx", "morphz")] = LocalHandle(actor)  # type: ignore[assignment]
    try:
        records = unpack(asyncio.run(agent.run({"context": "ctx", **spec})))
        export = open_reply(asyncio.run(actor.export(0, 5000)))
    finally:
        actor.close()
    return records, export


def test_threads_rebase_reject_and_retry_until_everything_commits(tmp_path: Path) -> None:
    spec = {
        "threads": 6,
        "transactions": 12,
        "conflict_rate": 0.5,
        "shared_plans": 1,
        "max_attempts": 50,
        "think_ms": 1,
    }
    records, export = run_local(tmp_path, spec)
    assert all(tuple(r) == RECORD_KEYS for r in records)
    outcomes = Counter(r["outcome"] for r in records)
    assert set(outcomes) <= {"committed", "rejected"}
    # every rejection is a conflict, retried under a new client id until it commits
    rejected = [r for r in records if r["outcome"] == "rejected"]
    assert rejected, "shared frames under concurrency must collide at least once"
    assert {r["error_code"] for r in rejected} == {"conflict"}
    assert all(r["conflicts"] and r["conflicts"][0][1] > r["base_version"] for r in rejected)
    steps = Counter((r["thread"], r["step"]) for r in records if r["outcome"] == "committed")
    assert len(steps) == 6 * 12 and set(steps.values()) == {1}
    assert any(r["rebased"] for r in records if r["outcome"] == "committed")
    ids = [r["client_id"] for r in records]
    assert len(ids) == len(set(ids))
    # the log holds exactly the committed client ids, each at its receipt's version
    logged = {rec["client_id"]: rec["version"] for rec in export["log"] if rec["kind"] == "model"}
    committed = {r["client_id"]: r["version"] for r in records if r["outcome"] == "committed"}
    assert logged == committed
