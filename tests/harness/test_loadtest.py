"""``morphz loadtest``: the plan, the history check, and runs on the session's Ray cluster."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from harness.agent_threads import AgentThread
from harness.loadtest import (
    REPORT_KEYS,
    TRAJECTORIES_ENV,
    LoadAgent,
    NoTrajectories,
    TrajectorySpec,
    TrajectoryThread,
    check_context,
    check_on_disk,
    check_options,
    default_agents,
    load_conversations,
    percentile,
    run_loadtest,
    spread,
    trajectories_dir,
)
from protocol.errors import MorphzError, NotFound, RequestError
from protocol.wire import unpack
from service.registry import Operation
from tests.actors.cluster import RayCluster
from tests.actors.local import LocalHandle
from tests.trajectories import SAMPLE

_SCRIPT = Path(sys.executable).with_name("morphz")
MORPHZ = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "morphz.cli"]
# The STATE-Bench sample the repository ships; the load test itself is always told where
# the trajectories are.
TRAJECTORIES = SAMPLE


# -- without Ray ----------------------------------------------------------------


def test_options_need_exactly_one_bound_and_name_the_bad_field() -> None:
    assert check_options({"threads": 2, "duration_s": 1}).contexts == 1
    for bad in ({"threads": 2}, {"threads": 2, "duration_s": 1, "transactions": 5}):
        with pytest.raises(RequestError) as info:
            check_options(bad)
        assert info.value.code == "bad_option"
    with pytest.raises(RequestError, match="conflict_rate"):
        check_options({"threads": 2, "transactions": 5, "conflict_rate": 1.5})
    with pytest.raises(RequestError, match="surprise"):
        check_options({"threads": 2, "transactions": 5, "surprise": True})


def test_threads_spread_in_contiguous_ranges_over_contexts_and_agents() -> None:
    plan = spread(threads=7, contexts=2, agents=3)
    ranges = [[n for _, numbers in groups for n in numbers] for groups in plan]
    assert ranges == [[0, 1, 2, 3], [4, 5, 6]]
    assert plan == [[(0, [0, 1, 2]), (1, [3])], [(1, [4]), (2, [5, 6])]]
    assert spread(threads=1, contexts=3, agents=2) == [[(0, [0])], [], []]
    # as many agents as threads: every thread is its own actor, whatever the contexts
    assert spread(threads=8, contexts=2, agents=8) == [
        [(k, [k]) for k in range(4)],
        [(k, [k]) for k in range(4, 8)],
    ]
    assert [default_agents(n) for n in (1, 4, 8, 32, 33, 1000)] == [1, 4, 8, 32, 32, 32]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def _local_agent(actor: ContextActor, agent: AgentThread) -> None:
    agent._handles[("ctx", "morphz")] = _Handle(actor)  # type: ignore[assignment]


class _Handle(LocalHandle):
    """LocalHandle plus the blocking ``deliver`` a replay calls from a worker thread."""

    loop: asyncio.AbstractEventLoop | None = None

    async def invoke_async(self, op: Operation[Any, Any], args: BaseModel) -> Any:
        self.loop = asyncio.get_running_loop()
        return await super().invoke_async(op, args)

    def deliver(self, ref: str) -> dict[str, Any]:
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(self.actor.deliver(ref), self.loop)
        return dict(open_reply(future.result()))


def _export(actor: ContextActor) -> dict[str, Any]:
    doc = open_reply(asyncio.run(actor.export(0, 5000)))
    assert isinstance(doc, dict) and not doc["more"]
    return doc


def test_the_check_passes_a_real_history_and_fails_a_doctored_one(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "ctx")
    agent = AgentThread()
    _local_agent(actor, agent)
    try:
        spec = {"context": "ctx", "threads": 4, "transactions": 10, "conflict_rate": 0.5}
        records = unpack(asyncio.run(agent.run(spec)))
        export = _export(actor)
    finally:
        actor.close()
    verdict = check_context(records, export)
    assert verdict.ok, verdict.summary()
    assert verdict.counts.replayed == export["version"] == len(export["log"])
    assert not check_on_disk(tmp_path / "ctx", records)

    committed = next(r for r in records if r["outcome"] == "committed")
    wrong = {**committed, "version": committed["version"] + 1000}
    assert check_context([*records, wrong], export).kinds() == {"lost_ack"}
    assert [v.kind for v in check_on_disk(tmp_path / "ctx", [wrong])] == ["not_on_disk"]
    # a "rejected" submission whose conflict is not in the log is unjustified
    bogus = {
        **committed,
        "client_id": "c-bogus",
        "outcome": "rejected",
        "error_code": "conflict",
        "conflicts": [["nowhere", 1]],
    }
    assert "unjustified_conflict" in check_context([*records, bogus], export).kinds()


def test_conversations_load_domains_interleaved() -> None:
    convs = load_conversations(TRAJECTORIES, limit=6)
    assert len(convs) == 6
    assert len({c.domain for c in convs[:3]}) == 3
    assert all(c.turns and c.turns[0].role == "user" for c in convs)
    assert any(t.tools for c in convs for t in c.turns)


def test_conversations_are_read_from_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_conversations(tmp_path / "absent")
    (tmp_path / "travel").mkdir()
    doc = {
        "conversation": [
            {"role": "system", "content": "You are a travel agent."},
            {"role": "user", "content": "Book me a flight to Lisbon."},
            {
                "role": "assistant",
                "content": "Booked: TP 123.",
                "tool_calls": [
                    {"name": "book_flight", "arguments": {"to": "LIS"}, "result": {"ok": True}}
                ],
            },
        ]
    }
    (tmp_path / "travel" / "7-book.json").write_text(json.dumps(doc), encoding="utf-8")
    (conv,) = load_conversations(tmp_path)
    assert conv.key == "travel-7" and [t.role for t in conv.turns] == ["user", "assistant"]
    assert json.loads(conv.turns[1].tools[0].text)["result"] == {"ok": True}
    (tmp_path / "travel" / "8-broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(RequestError) as info:
        load_conversations(tmp_path)
    assert info.value.code == "bad_trajectory"


def test_the_trajectory_directory_is_given_never_guessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRAJECTORIES_ENV, raising=False)
    with pytest.raises(NoTrajectories) as info:
        trajectories_dir()
    assert info.value.code == "no_trajectories" and isinstance(info.value, RequestError)
    assert "--trajectories" in info.value.message and TRAJECTORIES_ENV in info.value.message
    with pytest.raises(NoTrajectories):  # before any Ray connection is made
        run_loadtest({"threads": 1, "transactions": 1, "workload": "trajectories"})
    assert trajectories_dir(tmp_path) == tmp_path
    monkeypatch.setenv(TRAJECTORIES_ENV, str(tmp_path / "env"))
    assert trajectories_dir() == tmp_path / "env"
    assert trajectories_dir(tmp_path) == tmp_path  # the option wins


def test_a_replay_records_observes_summarizes_and_retires(tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    turns = [
        {"role": "user", "content": "Add the blue mug."},
        {
            "role": "assistant",
            "content": "Added.",
            "tool_calls": [
                {"name": "search", "arguments": {"q": "mug"}, "result": ["M-1"]},
                {"name": "add_to_cart", "arguments": {"id": "M-1"}, "result": "ok"},
            ],
        },
        {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "content": "You're welcome."},
    ]
    (tmp_path / "shop" / "1-mug.json").write_text(json.dumps({"conversation": turns}))
    convs = load_conversations(tmp_path)
    actor = ContextActor(str(tmp_path / "store"), "ctx")
    agent = LoadAgent()
    _local_agent(actor, agent)
    spec = TrajectorySpec(
        context="ctx",
        conversations=tuple(convs),
        threads=(
            TrajectoryThread(number=0, conversations=(0,), steps=12),
            TrajectoryThread(number=1, conversations=(0,), steps=12),
        ),
        conflict_rate=1.0,
    )
    try:
        records = unpack(asyncio.run(agent.replay(spec.model_dump())))
        export = _export(actor)
    finally:
        actor.close()
    assert check_context(records, export).ok
    final = {(r["thread"], r["step"]): r for r in records}
    assert len(final) == 24 and all(r["outcome"] == "committed" for r in final.values())
    kinds = Counter(r["kind"] for r in final.values())
    assert kinds == {"request": 8, "tool": 8, "reply": 8}  # two passes per thread
    frames = {f["id"]: f for f in export["frames"]}
    assert {"t0/shop-1/request", "t0/shop-1/tool/add_to_cart", "t1/shop-1/reply"} <= set(frames)
    assert frames["shared/shop"]["revision"] >= 2  # both threads wrote it
    events = Counter((e["kind"], e["lifecycle"]) for e in export["events"])
    # every tool result is retired once summarized; every request once delivered
    assert events == {("tool_result", "retired"): 8, ("user_message", "retired"): 8}
    assert all(r["source_events"] for r in records if r["kind"] == "request")


# -- on the session's Ray cluster ------------------------------------------------


def _options(ray_cluster: RayCluster, tmp_path: Path, namespace: str, **extra: Any) -> Any:
    return {
        "address": ray_cluster.cluster.address,
        "store_dir": str(tmp_path),
        "namespace": namespace,
        "seed": 3,
        **extra,
    }


@pytest.mark.ray
def test_synthetic_load_commits_rejects_and_checks_out(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    from actors import lookup

    seen: list[dict[str, Any]] = []
    doc = run_loadtest(
        _options(
            ray_cluster,
            tmp_path,
            namespace,
            threads=4,
            contexts=2,
            transactions=150,
            conflict_rate=0.3,
        ),
        progress=lambda p: seen.append(dict(p)),
    )
    assert tuple(doc) == REPORT_KEYS
    assert doc["history_ok"], doc["violations"]
    assert doc["violations"] == [] and doc["kills"] == 0
    assert doc["steps"] == 150 and doc["committed"] > 0
    # 45 steps on one shared frame between two threads per context: some collide
    assert doc["rejected"] > 0 and doc["retried"] > 0
    assert doc["committed"] + doc["gave_up"] + doc["unknown"] == doc["steps"]
    assert doc["checked"]["replayed"] == doc["checked"]["log_records"] == doc["committed"]
    assert doc["checked"]["acknowledged_on_disk"] == doc["committed"]
    assert sum(c["committed"] for c in doc["per_context"]) == doc["committed"]
    assert {c["node_id"] for c in doc["per_context"]} == {
        ray_cluster.head_node_id,
        ray_cluster.node2_id,
    }
    assert doc["latency_ms"]["p50"] > 0 and doc["throughput_tx_s"] > 0
    assert seen and seen[-1]["done"]
    # before the load, the progress says what is being started (not a bare "starting")
    phases = [p["phase"] for p in seen if "phase" in p]
    assert phases[0] == "starting 2 context actor(s)"
    assert phases[1].startswith("starting ") and "for 4 threads" in phases[1]
    assert all("phase" in p for p in seen[:2])
    for c in doc["per_context"]:  # the contexts were stopped; their stores stay
        with pytest.raises(NotFound):
            lookup(c["name"], namespace)
    # a store given is kept, holding the run's contexts and nothing else
    assert doc["store_kept"] is True and doc["store"] == str(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {c["name"] for c in doc["per_context"]}


@pytest.mark.ray
def test_killed_contexts_lose_no_acknowledged_commit(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    doc = run_loadtest(
        _options(
            ray_cluster,
            tmp_path,
            namespace,
            threads=4,
            contexts=2,
            duration_s=3.0,
            conflict_rate=0.3,
            kill_every_s=0.7,
        )
    )
    assert doc["kills"] >= 1, doc["kill_misses"]
    assert doc["history_ok"], doc["violations"]
    assert doc["committed"] > 0
    assert doc["checked"]["acknowledged_on_disk"] == doc["committed"]
    assert sum(c["kills"] for c in doc["per_context"]) == doc["kills"]
    assert len({k["pid"] for k in doc["kill_log"]}) == doc["kills"]  # a new process each time
    # a process that came back is left to serve the interval before it is killed again
    assert all(k["age_s"] >= 0.7 for k in doc["kill_log"]), doc["kill_log"]


@pytest.mark.ray
def test_trajectories_replay_three_conversations(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    doc = run_loadtest(
        _options(
            ray_cluster,
            tmp_path,
            namespace,
            threads=3,
            contexts=1,
            transactions=45,
            conflict_rate=0.3,
            workload="trajectories",
            trajectories_dir=str(TRAJECTORIES),
            conversations=3,
        )
    )
    assert doc["history_ok"], doc["violations"]
    assert doc["workload"] == "trajectories" and doc["steps"] == 45
    assert doc["committed"] + doc["gave_up"] + doc["unknown"] == 45


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["list", "fields"])
def test_shared_frames_as_a_list_or_by_field_edits(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str, mode: str
) -> None:
    doc = run_loadtest(
        _options(
            ray_cluster,
            tmp_path,
            namespace,
            threads=4,
            contexts=1,
            transactions=48,
            conflict_rate=0.6,
            shared_mode=mode,
            workload="trajectories",
            trajectories_dir=str(TRAJECTORIES),
            conversations=4,
        )
    )
    assert doc["history_ok"], doc["violations"]
    c = doc["contention"]
    assert c["shared_mode"] == mode
    if mode == "fields":  # appends from stale bases: never refused for concurrency
        assert c["conflicts"] == 0 and c["false_conflicts"] == 0
    else:  # every collision is of two appends to the same list, written as revises
        assert c["false_conflicts"] == c["conflicts"]
    assert c["rejections_per_1000_commits"] == round(
        doc["rejected"] * 1000 / max(1, doc["committed"]), 2
    )


@pytest.mark.ray
def test_a_doctored_record_fails_the_check(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str
) -> None:
    def tamper(context: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        fake = next(r for r in records if r["outcome"] == "committed")
        return [*records, {**fake, "version": fake["version"] + 7}]

    doc = run_loadtest(
        _options(ray_cluster, tmp_path, namespace, threads=2, transactions=10),
        tamper=tamper,
    )
    assert doc["history_ok"] is False
    kinds = {v["kind"] for v in doc["violations"]}
    assert kinds == {"lost_ack", "not_on_disk"}
    assert doc["per_context"][0]["history_ok"] is False


def test_the_command_needs_exactly_one_bound(tmp_path: Path) -> None:
    p = subprocess.run(
        [*MORPHZ, "--store", str(tmp_path), "loadtest", "--threads", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "exactly one of --duration and --transactions" in p.stderr


def test_the_command_says_how_to_give_the_trajectories(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != TRAJECTORIES_ENV}
    argv = [*MORPHZ, "--store", str(tmp_path), "--json", "loadtest", "--threads", "1"]
    p = subprocess.run(
        [*argv, "--transactions", "1", "--workload", "trajectories"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["error"]["code"] == "no_trajectories"
    assert TRAJECTORIES_ENV in doc["error"]["message"]


@pytest.mark.ray
def test_the_command_prints_one_json_document_and_leaves_the_users_store_alone(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(MORPHZ_STORE=str(mine), RAY_ADDRESS=ray_cluster.cluster.address)
    p = subprocess.run(
        [
            *MORPHZ,
            "--json",
            "loadtest",
            "--threads",
            "2",
            "--contexts",
            "2",
            "--transactions",
            "40",
            "--conflict-rate",
            "0.2",
            "--kill-context-every",
            "0.5",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout
    doc = json.loads(lines[0])
    for key in ("committed", "rebased", "rejected", "retried", "throughput_tx_s", "kills"):
        assert isinstance(doc[key], (int, float)), key
    assert set(doc["latency_ms"]) >= {"p50", "p99"}
    assert doc["history_ok"] is True and doc["violations"] == []
    assert (doc["threads"], doc["contexts"], doc["workload"]) == (2, 2, "synthetic")
    assert doc["conflict_rate"] == 0.2 and doc["duration_s"] > 0
    assert doc["committed"] > 0 and doc["steps"] == 40
    assert doc["committed"] + doc["gave_up"] + doc["unknown"] == doc["steps"]
    assert [c["name"] for c in doc["per_context"]] == [
        f"lt-{doc['run_id']}-0",
        f"lt-{doc['run_id']}-1",
    ]
    # its own temporary store, removed after the check (contexts killed meanwhile)
    assert doc["store_kept"] is False and not os.path.exists(doc["store"])
    assert list(tmp_path.iterdir()) == []  # neither MORPHZ_STORE nor ./.morphz was written


def test_the_human_report_shows_figures_and_violations(capsys: pytest.CaptureFixture[str]) -> None:
    from morphz.cli.loadtest import _human

    lat = {"p50": 1.5, "p99": 9.0, "max": 12.0}
    context = {
        "name": "lt-abc-0",
        "version": 12,
        "committed": 10,
        "rejected": 2,
        "throughput_tx_s": 5.0,
        "latency_ms": lat,
        "kills": 1,
        "history_ok": False,
        "violations": 1,
    }
    doc = {
        "run_id": "abc",
        "workload": "synthetic",
        "threads": 2,
        "contexts": 1,
        "agents": 1,
        "conflict_rate": 0.3,
        "shared_frames": 1,
        "requested": {"transactions": 12},
        "duration_s": 2.0,
        "steps": 12,
        "committed": 10,
        "rebased": 3,
        "rejected": 2,
        "retried": 2,
        "gave_up": 0,
        "unknown": 0,
        "throughput_tx_s": 5.0,
        "latency_ms": lat,
        "kills": 1,
        "history_ok": False,
        "violation_count": 1,
        "violations": [{"context": "lt-abc-0", "kind": "lost_ack", "detail": "v9 [/odd] gone"}],
        "per_context": [context],
    }
    _human(doc)
    out = capsys.readouterr().out
    assert "lt-abc-0" in out and "1 violation(s)" in out and "lost_ack" in out
    assert "[/odd]" in out  # details are printed as text, never as markup


# -- stopping early, temporary stores, SIGINT --------------------------------------------


def test_a_stopped_agent_answers_the_records_made_so_far(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "ctx")
    agent = LoadAgent()
    _local_agent(actor, agent)
    spec = {"context": "ctx", "threads": 3, "transactions": 1, "conflict_rate": 0.3}

    async def run_then_stop() -> bytes:
        task = asyncio.ensure_future(agent.run_for(spec, None, 1_000_000))
        while actor._ctx is None or actor._ctx.meta().version < 10:
            await asyncio.sleep(0.01)
        await agent.stop()
        return await task

    try:
        records = unpack(asyncio.run(run_then_stop()))
        export = _export(actor)
    finally:
        actor.close()
    assert 10 <= export["version"] < 1_000_000
    assert sum(r["outcome"] == "committed" for r in records) == export["version"]
    assert check_context(records, export).ok
    with pytest.raises(RequestError):
        asyncio.run(LoadAgent().run_for(spec, None, None))


@pytest.mark.ray
def test_without_a_store_the_run_uses_a_temporary_one_and_removes_it(
    ray_cluster: RayCluster, tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    options = _options(ray_cluster, tmp_path, namespace, threads=2, transactions=20)
    del options["store_dir"]
    doc = run_loadtest(options)
    assert doc["history_ok"] and doc["committed"] > 0 and doc["interrupted"] is False
    assert doc["checked"]["acknowledged_on_disk"] == doc["committed"]  # checked before removal
    assert doc["store_kept"] is False and not os.path.exists(doc["store"])
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory
    # a store given is kept: test_synthetic_load_commits_rejects_and_checks_out


@pytest.mark.ray
def test_sigint_prints_the_partial_report_and_its_history_check(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    from service.store import Store

    env = {k: v for k, v in os.environ.items() if k != "MORPHZ_STORE"}
    env["RAY_ADDRESS"] = ray_cluster.cluster.address
    store = tmp_path / "lt"
    # A runner started in the background of a shell hands its children SIGINT ignored:
    # the child takes it back, as a user's terminal gives it.
    sigint = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"
    cli = [sys.executable, "-c", f"{sigint}; from morphz.cli.main import main; main()"]
    p = subprocess.Popen(
        [*cli, "--store", str(store), "--json", "loadtest", "--threads", "4"]
        + ["--contexts", "2", "--duration", "600", "--conflict-rate", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # mid-run: both contexts have committed something
            assert p.poll() is None and time.monotonic() < deadline, "the load did not start"
            names = [d.name for d in store.iterdir()] if store.is_dir() else []
            versions = []
            for name in names:
                try:
                    with Store(store).open(name, readonly=True) as ctx:
                        versions.append(int(ctx.meta().version))
                except MorphzError:
                    versions.append(0)
            if len(versions) == 2 and min(versions) >= 5:
                break
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"no report 180 s after SIGINT: {err[-3000:]}") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err[-2000:]
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    doc = json.loads(lines[0])
    assert tuple(doc) == REPORT_KEYS
    assert doc["interrupted"] is True and doc["duration_s"] < 600
    assert doc["history_ok"] is True, doc["violations"]
    assert doc["committed"] >= 10
    assert doc["checked"]["log_records"] == doc["committed"]  # every commit, checked
    assert doc["checked"]["acknowledged_on_disk"] == doc["committed"]
    assert doc["store"] == str(store) and doc["store_kept"] is True
