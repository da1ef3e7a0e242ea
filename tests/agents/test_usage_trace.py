"""Usage traces (R42) of a scripted multi-step task, and "which memories influenced this decision"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agents.actions import ToolFailed, ToolRunner
from agents.loop import AgentLoop
from agents.port import EmbeddedPort
from morphz.cli import cli
from protocol.errors import NotFound, OutOfRange, RequestError
from protocol.governance import find_low_quality
from protocol.turns import CompiledInput, ModelTurn, Reply, ToolCall
from service.context import Context
from service.store import open_context
from storage.memory import MemoryBackend


class Script:
    """A model answering call N with turn N (then ``done``); it keeps every input it saw."""

    def __init__(self, turns: list[ModelTurn]) -> None:
        self.turns = list(turns)
        self.inputs: list[CompiledInput] = []

    def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
        self.inputs.append(compiled)
        return self.turns.pop(0) if self.turns else ModelTurn(finish="done")


def seeded(ctx: Context) -> str:
    """Three settled frames; returns the user request's ref."""
    facts = ctx.observe("tool_result", "regression suite: 412 passed; region=cn-shanghai")
    ctx.claim()
    ctx.commit(
        f"(context-tx (base-version {ctx.version()})"
        f" (derive test-result (from {facts.ref}) (tests passed))"
        f" (derive deploy-target (from {facts.ref}) (region cn-shanghai))"
        f" (derive release (from test-result) (goal ship-v1))"
        " (relate test-result supports release)"
        " (relate deploy-target supports release))"
    )
    return ctx.observe("user_message", "Package v1 if the tests support it.").ref


def task(request: str) -> list[ModelTurn]:
    recall = ToolCall(
        name="recall", arguments={"frame_id": "release", "depth": 1, "direction": "both"}
    )
    return [
        # call 1: look up what supports the release
        ModelTurn(memory_calls=(recall,)),
        # call 2: decide from the recalled test result (not the deploy target), and act
        ModelTurn(
            transactions=(
                "(context-tx (base-version 1)"
                " (derive plan (from test-result release) (package ship-v1)))",
            ),
            action=ToolCall(name="package", arguments={"why": "plan from test-result"}),
        ),
        # call 3: answer the user
        ModelTurn(action=Reply(text="packaged, see plan", request_ref=request)),
    ]


def test_a_scripted_task_leaves_usage_traces_that_answer_why() -> None:
    ctx = Context(MemoryBackend())
    request = seeded(ctx)
    model = Script(task(request))
    loop = AgentLoop(EmbeddedPort(ctx), model, session="main")
    steps = loop.run(6)
    assert [s.action for s in steps[:3]] == [None, "tool package", f"reply {request}"]

    calls = ctx.traces()
    assert [c["call"] for c in calls] == [1, 2, 3, 4]
    first, second, third = calls[:3]
    # call 1 retrieved nothing yet, asked for a recall whose frames reach call 2
    assert first["retrieved"] == [] and first["decisions"] == []
    (asked,) = first["recalls"]
    assert set(asked["frames"]) == {"release", "test-result", "deploy-target"}
    assert asked["ref"] in second["events_present"]
    # call 2 saw them retrieved, cited two of them, and its action named one
    assert set(second["retrieved"]) == {"release", "test-result", "deploy-target"}
    (decision,) = second["decisions"]
    assert decision["cited"] == ["test-result", "release"]
    assert decision["writes"] == ["plan"]
    assert second["action_cited"] == ["test-result"]
    assert second["cited"] == ["test-result", "release"]
    assert second["outcome"] == "ok"
    assert third["action_cited"] == sorted(["plan", request])  # the reply: its text, its request
    assert third["cited"] == ["plan"]

    why = ctx.influence(version=decision["version"])
    assert why["traced"] and why["call"] == 2
    assert why["cited_frames"] == ["release", "test-result"]
    assert why["retrieved_adopted"] == ["release", "test-result"]
    assert why["retrieved_not_adopted"] == ["deploy-target"]
    assert "deploy-target" in why["present_not_cited"]

    whole = ctx.influence(call=2)
    assert whole["action"] == "tool package" and whole["outcome"] == "ok"

    # which calls a frame took part in, and how
    roles = {c["call"]: c["roles"] for c in ctx.traces(frame="deploy-target")}
    assert roles[2] == ["present", "retrieved"]
    assert roles[1] == ["present", "retrieved"]  # present, and returned by call 1's recall
    assert {c["call"]: c["roles"] for c in ctx.traces(frame="plan")}[3] == ["present", "cited"]


def test_an_untraced_decision_answers_from_the_log() -> None:
    ctx = Context(MemoryBackend())
    seeded(ctx)
    why = ctx.influence(version=1)
    assert not why["traced"]
    assert why["cited_frames"] == ["test-result"]
    assert why["cited_events"] == ["@e1"]
    assert why["decisions"][0]["writes"] == [
        "deploy-target",
        "deploy-target supports release",
        "release",
        "test-result",
        "test-result supports release",
    ]


def test_bad_influence_requests_are_typed_and_change_nothing() -> None:
    ctx = Context(MemoryBackend())
    seeded(ctx)
    before = ctx.state()
    with pytest.raises(OutOfRange):
        ctx.influence(version=0)
    with pytest.raises(OutOfRange):
        ctx.influence(version=ctx.version() + 1)
    with pytest.raises(OutOfRange):
        ctx.influence(call=0)
    with pytest.raises(NotFound):
        ctx.influence(call=7)
    with pytest.raises(RequestError):
        ctx.influence()
    with pytest.raises(RequestError):
        ctx.influence(version=1, call=1)
    assert ctx.state() == before


def test_failed_uses_of_a_procedure_quarantine_it_from_traces() -> None:
    ctx = Context(MemoryBackend())
    e = ctx.observe("tool_result", "deploy with: ./deploy.sh --fast")
    ctx.claim()
    ctx.commit(
        f"(context-tx (base-version 0) (derive deploy-howto (from {e.ref}) (run ./deploy.sh))"
        " (envelope deploy-howto (kind procedural)))"
    )

    def broken(call: ToolCall) -> str:
        raise ToolFailed("deploy.sh: exit 1")

    turns = [
        ModelTurn(action=ToolCall(name="deploy", arguments={"how": "deploy-howto"}))
        for _ in range(3)
    ]
    loop = AgentLoop(
        EmbeddedPort(ctx), Script(turns), tools=ToolRunner(handlers={"deploy": broken})
    )
    steps = loop.run(4)
    assert [s.outcome for s in steps[:3]] == ["failed"] * 3
    assert ctx.read_event(steps[0].observed[0])["text"] == "deploy: failed: deploy.sh: exit 1"
    findings = find_low_quality_of(ctx)
    assert [(f.frame_id, f.rule) for f in findings] == [("deploy-howto", "failing_procedure")]


def find_low_quality_of(ctx: Context) -> list[Any]:
    traces = ctx.traces()
    return ctx.backend.read(lambda v: find_low_quality(v, now_tick=ctx.tick(), usage=traces))


def test_ledger_events_are_never_in_the_model_input() -> None:
    ctx = Context(MemoryBackend())
    request = ctx.observe("user_message", "Ship it.").ref
    ship = ToolCall(name="package", irreversible=True, idempotency_key="ship-1")
    model = Script(
        [ModelTurn(action=ship), ModelTurn(action=Reply(text="ok", request_ref=request))]
    )
    loop = AgentLoop(EmbeddedPort(ctx), model)
    loop.run(3)
    ledger = [e["ref"] for e in ctx.state()["events"] if e["kind"] == "ledger"]  # intent and result
    assert len(ledger) == 2
    for compiled in model.inputs[1:]:
        assert not set(ledger) & set(compiled.events_present)
        text = "\n".join(str(m["content"]) for m in compiled.messages)
        assert "intent:" not in text and "[actions]" not in text
    assert ctx.tick() == 2  # the request's and the tool result's batches; ledger events add none


def test_cli_trace_decision_and_call(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with open_context(store, "ctx", create=True) as ctx:
        request = seeded(ctx)
        AgentLoop(EmbeddedPort(ctx), Script(task(request))).run(6)
    runner = CliRunner()
    base = ["--store", str(store), "--context", "ctx"]
    out = runner.invoke(cli, [*base, "--json", "trace", "--decision", "2"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["retrieved_not_adopted"] == ["deploy-target"] and doc["call"] == 2
    text = runner.invoke(cli, [*base, "trace", "--call", "2"])
    assert text.exit_code == 0
    assert "retrieved, not adopted: deploy-target" in text.output
    assert "action: tool package -> ok" in text.output
    listed = runner.invoke(cli, [*base, "trace", "--frame", "plan"])
    assert "call 3" in listed.output and "(present, cited)" in listed.output
    for bad, code in (
        (["trace", "--decision", "99"], 1),
        (["trace", "--call", "99"], 1),
        (["trace", "--decision", "x"], 2),
        (["trace", "--frame", "plan", "--call", "1"], 2),
    ):
        r = runner.invoke(cli, [*base, *bad])
        assert r.exit_code == code, (bad, r.output)


def test_a_model_search_is_retrieval_in_the_traces_and_hides_quarantined_frames(
    tmp_path: Path,
) -> None:
    with open_context(tmp_path, "ctx", create=True) as ctx:
        request = seeded(ctx)
        ctx.commit(f"(context-tx (base-version {ctx.version()}) (derive old-region (region eu)))")
        ctx.quarantine(["old-region"])
        search = ToolCall(name="search", arguments={"query": "region", "limit": 5})
        hostile = ToolCall(name="search", arguments={"query": "region", "trust": ["quarantined"]})
        model = Script(
            [
                ModelTurn(memory_calls=(search, hostile)),
                ModelTurn(action=Reply(text="deploy-target says cn-shanghai", request_ref=request)),
            ]
        )
        port = EmbeddedPort(ctx)
        try:
            steps = AgentLoop(port, model).run(4)
        finally:
            port.close()
        found, refused = steps[0].recalls[0], steps[0].observed[1]
        assert found["frames"] == ["deploy-target"]  # old-region is quarantined: not returned
        text = ctx.read_event(found["ref"])["text"]
        assert "deploy-target frame" in text and "old-region" not in text
        assert ctx.read_event(refused)["text"].startswith("search: not_permitted:")
        second = ctx.traces()[1]
        assert second["retrieved"] == ["deploy-target"]
        assert second["action_cited"] == sorted(["deploy-target", request])


def test_model_search_arguments_are_checked(tmp_path: Path) -> None:
    from storage.search import LexicalIndex, model_search

    with open_context(tmp_path, "ctx", create=True) as ctx:
        seeded(ctx)
        index = LexicalIndex.for_backend(ctx.backend)
        try:
            index.catch_up()
            assert [h.id for h in model_search(index, {"query": "cn-shanghai"}).hits] == [
                "deploy-target",
                "@e1",
            ]
            for bad, error in (
                ("region", RequestError),
                ({"query": 7}, RequestError),
                ({"query": "x", "limit": 0}, OutOfRange),
                ({"query": "x", "limit": 51}, OutOfRange),
                ({"query": "x", "limit": True}, OutOfRange),
                ({"query": "x", "trust": ["rejected"]}, RequestError),
                ({"query": "x", "trust": ["nonsense"]}, RequestError),
                ({"query": "x", "kinds": ["nonsense"]}, RequestError),
                ({"query": "x", "id_prefix": 3}, RequestError),
                ({"query": "x", "valid_at": "soon"}, RequestError),
                ({"query": "x", "drop": "tables"}, RequestError),
            ):
                with pytest.raises(error):
                    model_search(index, bad)
            ledger = model_search(index, {"query": "intent", "kinds": ["ledger"]})
            assert ledger.hits == ()
        finally:
            index.close()
