"""The agent loop with the scripted seed stories over an embedded context (no Ray)."""

from __future__ import annotations

from typing import Any

from agents.actions import DEMO_TOOL_RESULTS, ToolRunner
from agents.loop import AgentLoop
from agents.port import EmbeddedPort
from agents.scripted import release_policy, scripted_model
from protocol.compiler import CompilerConfig
from protocol.receipts import Receipt
from protocol.turns import CompiledInput, InputOverflow, ModelTurn, ToolCall
from service.context import Context
from storage.memory import MemoryBackend

SHIP = "Ship v1 once the regression tests pass."


def new_ctx() -> Context:
    return Context(MemoryBackend())


def loop_for(ctx: Context, story: str, **kw: Any) -> AgentLoop:
    return AgentLoop(EmbeddedPort(ctx), scripted_model(story), session=story, **kw)


class RawPolicy:
    """A model that follows a policy without dropping tool actions in maintenance."""

    def __init__(self) -> None:
        self.policy = release_policy()

    def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
        return self.policy(compiled) or ModelTurn(finish="done")


def test_release_story_tests_package_reply() -> None:
    ctx = new_ctx()
    ship = ctx.observe("user_message", SHIP, session="release")
    tools = ToolRunner()
    loop = loop_for(ctx, "release", tools=tools)
    steps = loop.run(12)
    assert steps[-1].done
    assert tools.ran == ["run_tests", "package"]
    assert ctx.frame("release")["body"] == "(goal ship-v1) (stage packaged)"
    assert ctx.frame("test-result")["body"] == "(tests passed)"
    assert ["test-result", "supports", "release"] in ctx.state()["relations"]
    # R10: the step that planned packaging recorded "packaging", not "packaged".
    assert any(s.action == "tool package" for s in steps)
    assert [s.delivered for s in steps if s.delivered] == [ship.ref]
    # Delivered, the request could retire (R19 lifted).
    assert ctx.event(ship.ref)["lifecycle"] == "retired"


def test_request_stays_protected_until_the_reply() -> None:
    ctx = new_ctx()
    ship = ctx.observe("user_message", SHIP, session="release")
    loop = loop_for(ctx, "release")
    loop.step()  # plan + run_tests
    early = ctx.commit(f"(context-tx (base-version {ctx.version()}) (retire {ship.ref}))")
    assert early.status == "rejected" and early.errors[0].code == "causally_protected"
    loop.run(12)
    assert ctx.event(ship.ref)["delivered"] is True


def test_deployment_story_successor_retires_old_target() -> None:
    ctx = new_ctx()
    ctx.observe("user_message", "Deploy the service to cn-hangzhou.", session="deployment")
    ctx.observe("external", DEMO_TOOL_RESULTS["read_config"], session="deployment")
    steps = loop_for(ctx, "deployment").run(8)
    assert steps[-1].done and len(steps) == 3
    assert ctx.frame("deployment/target-v1")["lifecycle"] == "retired"
    v2 = ctx.frame("deployment/target-v2")
    assert v2["lifecycle"] == "active" and "cn-shanghai" in v2["body"]
    rel = ["deployment/target-v2", "supersedes", "deployment/target-v1"]
    assert rel in ctx.state()["relations"]


def test_consolidation_story_procedure_supersedes_cases() -> None:
    ctx = new_ctx()
    a = ctx.observe("external", "Release case A (monorepo).", session="consolidation")
    b = ctx.observe("external", "Release case B (split repos).", session="consolidation")
    ctx.claim()
    seeded = ctx.commit(
        f"(context-tx (base-version {ctx.version()})"
        f" (derive release-case-a (from {a.ref}) (layout monorepo) (outcome shipped))"
        f" (derive release-case-b (from {b.ref}) (layout split-repos) (outcome shipped))"
        f" (retire {a.ref} {b.ref}))"
    )
    assert seeded.committed
    loop_for(ctx, "consolidation").run(8)
    assert ctx.frame("release-case-a")["lifecycle"] == "retired"
    assert ctx.frame("release-case-b")["lifecycle"] == "retired"
    procedure = ctx.frame("release-procedure")
    assert procedure["lifecycle"] == "active"
    assert "monorepo" in procedure["body"] and "split-repos" in procedure["body"]


class PauseDuringPackaging:
    """Hook of the release loop: the pause thread runs just before packaging commits."""

    def __init__(self, pause: AgentLoop) -> None:
        self.pause = pause
        self.fired = False

    def before_commit(self, loop: AgentLoop, turn: ModelTurn, compiled: CompiledInput) -> None:
        if not self.fired and any("(stage packaging)" in tx for tx in turn.transactions):
            self.fired = True
            self.pause.step()

    def after_commit(self, loop: AgentLoop, turn: ModelTurn, receipts: list[Receipt]) -> None:
        pass


def test_pause_conflicts_rereads_and_both_facts_held() -> None:
    ctx = new_ctx()
    ctx.observe("user_message", SHIP, session="release")
    pause = loop_for(ctx, "pause")
    release = loop_for(ctx, "release", hooks=PauseDuringPackaging(pause))
    release.step()  # the release frame exists; now the pause instruction arrives
    pause_req = ctx.observe("user_message", "Pause the release.", session="pause")
    release.run(12)
    pause.run(12)
    rejected = [code for s in release.results for code in s.rejected]
    assert "conflict" in rejected  # the packaging transaction lost the race …
    body = ctx.frame("release")["body"]
    assert "(stage paused)" in body and "(tests passed)" in body  # … and nothing was lost
    assert "package" not in release.tools.ran  # paused: the stale action was dropped
    assert any(s.dropped for s in release.results)
    assert ctx.event(pause_req.ref)["delivered"] is True


def test_maintenance_defers_external_action_then_resumes() -> None:
    ctx = new_ctx()
    ctx.observe("user_message", SHIP, session="release")
    big = "regression suite: 412 passed, 0 failed\n" + "\n".join(
        f"test_case_{i} ok" for i in range(300)
    )
    tools = ToolRunner({**DEMO_TOOL_RESULTS, "run_tests": big})
    cfg = CompilerConfig(budget_tokens=2700, reserve_tokens=0, long_result_tokens=100_000)
    loop = AgentLoop(EmbeddedPort(ctx), RawPolicy(), session="release", config=cfg, tools=tools)
    steps = loop.run(12)
    entered = next(i for i, s in enumerate(steps) if s.maintenance)
    assert steps[entered].deferred == ["package"]  # deferred, not run
    assert steps[entered].committed  # context_tx kept working in maintenance
    after = steps[entered + 1]
    assert not after.maintenance and after.action == "tool package"  # left, and resumed
    assert loop.deferred == []
    assert tools.ran == ["run_tests", "package"]
    assert ctx.frame("release")["body"] == "(goal ship-v1) (stage packaged)"


def test_deferred_action_resumes_when_the_model_offers_nothing() -> None:
    ctx = new_ctx()
    ctx.observe("user_message", "hello", session="s")
    calls: list[bool] = []

    class Once:
        def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
            calls.append(compiled.capacity.maintenance)
            if len(calls) == 1:
                return ModelTurn(action=ToolCall(name="read_config"))
            return ModelTurn(finish="done")

    tight = CompilerConfig(budget_tokens=1300, reserve_tokens=0, maintenance_at=0.5, resume_at=0.5)
    loop = AgentLoop(EmbeddedPort(ctx), Once(), session="s", config=tight)
    first = loop.step()
    assert first.maintenance and first.deferred == ["read_config"]
    loop.config = CompilerConfig()  # room again
    loop.previous = None
    second = loop.step()
    assert second.resumed == ["read_config"] and not second.idle
    assert loop.deferred == []
    assert loop.tools.ran == ["read_config"]


def test_input_overflow_recompiles_in_maintenance() -> None:
    ctx = new_ctx()
    ctx.observe("user_message", SHIP, session="release")
    ctx.observe("external", "build log\n" + "line ok\n" * 2000, session="release")

    class Overflowing:
        def __init__(self) -> None:
            self.inner = scripted_model("release")
            self.seen: list[bool] = []

        def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
            self.seen.append(compiled.capacity.maintenance)
            if len(self.seen) == 1:
                raise InputOverflow("context_length_exceeded")
            return self.inner.respond(compiled, tools)

    model = Overflowing()
    loop = AgentLoop(EmbeddedPort(ctx), model, session="release")
    r = loop.step()
    assert r.overflow and r.maintenance
    assert model.seen == [False, True]
    assert r.committed and r.action is None  # the tx committed; run_tests not run in maintenance


def test_traces_record_frames_present() -> None:
    ctx = new_ctx()
    ctx.observe("user_message", SHIP, session="release")
    loop_for(ctx, "release").run(12)
    traces = ctx.traces()
    assert traces and all(t["session"] == "release" for t in traces)
    assert traces[0]["frames_present"] == []
    assert "release" in traces[1]["frames_present"]
    with_tests = ctx.traces(frame="test-result")
    assert with_tests and all("test-result" in t["frames_present"] for t in with_tests)
    assert any(t["action"] == "reply @e1" for t in with_tests)


def test_memory_calls_answer_as_recall_results() -> None:
    ctx = new_ctx()
    e = ctx.observe("user_message", "hello there", session="s")
    ctx.claim()
    ctx.commit(f"(context-tx (base-version 0) (derive note (from {e.ref}) (hello)))")

    class Reader:
        def respond(self, compiled: CompiledInput, tools: tuple[dict[str, Any], ...]) -> ModelTurn:
            return ModelTurn(
                memory_calls=(
                    ToolCall(name="read_event", arguments={"ref": e.ref}),
                    ToolCall(name="recall", arguments={"frame_id": "note"}),
                )
            )

    r = AgentLoop(EmbeddedPort(ctx), Reader(), session="s").step()
    assert r.memory == ["read_event", "recall"] and len(r.observed) == 2
    assert "hello there" in ctx.read_event(r.observed[0])["text"]
    assert ctx.event(r.observed[1])["kind"] == "recall_result"
