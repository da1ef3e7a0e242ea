"""Irreversible actions survive a crashed agent thread without being repeated (R43).

The agent thread runs the release story in a child process over the durable
store; its ``package`` tool counts its side effect in a file. The process is
killed (``os._exit``) between the side effect and the recorded result, or
right after the result was recorded but before the model saw it. A new loop
on the same context then finishes the story: the counter stays 1, and the
event history shows why.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agents.actions import INTENT, RECONCILE, RESULT, ToolRunner, key_event_id
from agents.loop import AgentLoop
from agents.port import EmbeddedPort
from agents.scripted import scripted_model
from protocol.turns import ModelTurn, ToolCall
from service.context import Context
from service.store import open_context
from storage.memory import MemoryBackend

ROOT = Path(__file__).resolve().parents[2]
SHIP = "Ship v1 once the regression tests pass."
KEY = "package:ship-v1"

CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from agents.actions import RESULT, ToolRunner
    from agents.loop import AgentLoop
    from agents.port import EmbeddedPort
    from agents.scripted import scripted_model
    from service.store import open_context

    store, counter, mode = {store!r}, {counter!r}, {mode!r}

    def package(call):
        n = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
        with open(counter, "w") as f:
            f.write(str(n)); f.flush(); os.fsync(f.fileno())
        if mode == "during":
            os._exit(17)  # the side effect happened; its result was never recorded
        return "package: dist/app-1.0.0.tgz"

    class CrashAfterResult(EmbeddedPort):
        def observe_many(self, items):
            out = super().observe_many(items)
            if mode == "after" and any(t.startswith(RESULT) for _, t, _, _ in items):
                os._exit(17)  # recorded durably; the model never saw it
            return out

    ctx = open_context(store, "work")
    ctx.observe("user_message", {ship!r}, session="release")
    loop = AgentLoop(CrashAfterResult(ctx), scripted_model("release"), session="release",
                     tools=ToolRunner(handlers={{"package": package}}))
    loop.run(12)
    sys.exit(0)
    """
)


def kinds_and_texts(ctx: Context) -> list[tuple[str, str]]:
    out = []
    for e in ctx.state()["events"]:
        out.append((e["kind"], ctx.read_event(e["ref"])["text"]))
    return out


class ReplanFirst:
    """The release model, but its first turn re-plans the package call (as a restarted
    thread re-deciding its pending action would)."""

    def __init__(self) -> None:
        self.model = scripted_model("release")
        self.first = True

    def respond(self, compiled: Any, tools: Any) -> ModelTurn:
        if self.first:
            self.first = False
            call = ToolCall(name="package", irreversible=True, idempotency_key=KEY)
            return ModelTurn(action=call)
        return self.model.respond(compiled, tools)


def counting_runner(counter: list[int], **kw: Any) -> ToolRunner:
    def package(call: ToolCall) -> str:
        counter[0] += 1
        return "package: dist/app-1.0.0.tgz"

    return ToolRunner(handlers={"package": package}, **kw)


@pytest.mark.parametrize("mode", ["during", "after"])
def test_a_killed_agent_thread_does_not_repeat_the_irreversible_action(
    tmp_path: Path, mode: str
) -> None:
    store, counter = str(tmp_path / "store"), str(tmp_path / "counter")
    code = CHILD.format(root=str(ROOT), store=store, counter=counter, mode=mode, ship=SHIP)
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 17, child.stderr
    assert Path(counter).read_text() == "1"

    ctx = open_context(store, "work")
    try:
        texts = [t for _, t in kinds_and_texts(ctx)]
        assert f"{INTENT} package key={KEY}" in texts
        assert any(t.startswith(RESULT) for t in texts) == (mode == "after")

        # restart: a new thread, a new runner, the same context
        count = [0]
        runner = counting_runner(count)
        loop = AgentLoop(EmbeddedPort(ctx), ReplanFirst(), session="release", tools=runner)
        steps = loop.run(12)
        assert count == [0] and Path(counter).read_text() == "1"  # never repeated
        events = kinds_and_texts(ctx)
        intents = [t for k, t in events if k == "ledger" and t.startswith(INTENT)]
        results = [t for k, t in events if k == "ledger" and t.startswith(RESULT)]
        reconciles = [t for k, t in events if k == "ledger" and t.startswith(RECONCILE)]
        assert intents == [f"{INTENT} package key={KEY}"]
        if mode == "during":
            # outcome unknown: reported, recorded once, not rerun, not guessed
            assert results == []
            assert reconciles == [f"{RECONCILE} package key={KEY} needs reconciliation"]
            assert runner.unreconciled == [KEY]
            assert steps[0].tools == ["unknown"]
            assert steps[0].error == f"needs reconciliation: package key={KEY}"
        else:
            # the result was recorded before the crash: the model sees it, nothing reruns
            assert results == [f"{RESULT} package key={KEY}\npackage: dist/app-1.0.0.tgz"]
            assert reconciles == [] and runner.unreconciled == []
            assert steps[0].tools == ["reused"]
            assert [t for k, t in events if k == "tool_result"].count(
                "package: dist/app-1.0.0.tgz"
            ) == 1
            assert ctx.frame("release")["body"] == "(goal ship-v1) (stage packaged)"
    finally:
        ctx.close()


def test_recorded_result_is_reused_and_status_reconciles() -> None:
    ctx = Context(MemoryBackend())
    port = EmbeddedPort(ctx)
    call = ToolCall(name="package", irreversible=True, idempotency_key="k-1")
    count = [0]
    first = counting_runner(count).run_recorded(call, port, "main")
    assert first.ran and count == [1]
    again = counting_runner(count).run_recorded(call, port, "main")  # a new runner: a restart
    assert (again.status, again.text, count) == ("reused", "package: dist/app-1.0.0.tgz", [1])

    # an intent left without a result, and a tool that knows its outcome by key
    port.observe(
        "ledger",
        f"{INTENT} package key=k-2",
        session="actions",
        event_id=key_event_id("intent", "k-2"),
    )
    call2 = call.model_copy(update={"idempotency_key": "k-2"})
    runner = counting_runner(
        count, statuses={"package": lambda key: f"package: done earlier ({key})"}
    )
    out = runner.run_recorded(call2, port, "main")
    assert (out.status, out.text, count) == ("reconciled", "package: done earlier (k-2)", [1])
    assert counting_runner(count).run_recorded(call2, port, "main").status == "reused"

    # reversible calls and calls without a key run as before
    plain = counting_runner(count).run_recorded(ToolCall(name="package"), port, "main")
    assert plain.ran and count == [2]


@pytest.mark.ray
def test_irreversible_action_through_the_context_actor(
    ray_cluster: Any, tmp_path: Path, context_name: str, namespace: str
) -> None:
    from actors import connect

    handle = connect(context_name, store_dir=tmp_path, namespace=namespace)
    try:
        call = ToolCall(name="package", irreversible=True, idempotency_key="ray-1")
        count = [0]

        class Crash(Exception):
            pass

        def dies(call: ToolCall) -> str:
            count[0] += 1
            raise Crash  # the thread dies after the side effect, before the result

        with pytest.raises(Crash):
            ToolRunner(handlers={"package": dies}).run_recorded(call, handle, "main")
        out = counting_runner(count).run_recorded(call, handle, "main")
        assert out.status == "unknown" and count == [1]
        assert handle.event(key_event_id("intent", "ray-1"))["kind"] == "ledger"
        assert handle.read_event(key_event_id("reconcile", "ray-1"))["text"].startswith(RECONCILE)
    finally:
        handle.shutdown()
