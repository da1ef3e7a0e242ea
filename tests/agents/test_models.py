"""Model adapters (R38): the OpenAI-compatible client against a loopback server, and the
scripted model's seed-story policies against a real context.

No Ray here: both adapters are used by embedded agents too.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from agents.models import ModelConfig, OpenAIChatModel, is_overflow, parse_answer
from agents.scripted import (
    ScriptedModel,
    build_tx,
    consolidation_policy,
    deployment_policy,
    first_match,
    pause_policy,
    read_scene,
    release_policy,
)
from agents.tools import MEMORY_TOOL_SPECS
from protocol.errors import RequestError
from protocol.sexpr import read_forms
from protocol.turns import (
    MEMORY_TOOLS,
    Capacity,
    CompiledInput,
    InputOverflow,
    ModelTurn,
    Reply,
    ToolCall,
)
from protocol.tx import Retire
from protocol.txlang import parse_tx, print_tx
from service.context import Context
from tests.actors.loopback import (
    Answer,
    Loopback,
    call,
    error_answer,
    text_answer,
    tools_answer,
)
from tests.seed_texts import CONSOLIDATE_TX, RELEASE_TX

KEY = "sk-test-9f8e7d6c5b4a"
PACKAGE_TOOL = {
    "type": "function",
    "function": {
        "name": "package",
        "description": "Build the release package.",
        "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
    },
}


# -- compiled inputs ------------------------------------------------------------


def capacity(maintenance: bool = False) -> Capacity:
    return Capacity(
        tokens=900,
        budget=1000 if maintenance else 8000,
        pressure=0.9 if maintenance else 0.1,
        maintenance=maintenance,
    )


def compiled(
    messages: list[dict[str, Any]],
    *,
    version: int = 3,
    maintenance: bool = False,
    frames: tuple[str, ...] = (),
    events: tuple[str, ...] = (),
    batch: tuple[str, ...] = (),
) -> CompiledInput:
    return CompiledInput(
        messages=tuple(messages),
        tokens=900,
        prefix_tokens=400,
        capacity=capacity(maintenance),
        version=version,
        tick=2,
        session="main",
        frames_present=frames,
        events_present=events,
        maintenance_batch=batch,
    )


SIMPLE = compiled(
    [
        {
            "role": "system",
            "content": "You keep structured memory. Write (context-tx …) with context_tx.",
        },
        {
            "role": "user",
            "content": "# Observations\n@e1 [user_message] Ship v1.\n# Runtime\n(version 3)",
        },
    ],
    events=("@e1",),
)


STYLES = ("sexp", "lines", "compiler")


def render(
    ctx: Context, *, style: str = "sexp", maintenance: bool = False, batch: tuple[str, ...] = ()
) -> CompiledInput:
    """A stand-in for the compiler: the active context of *ctx* as chat messages.

    ``sexp``: one message with headed sections and ``(frame ID (revision N) (from …) BODY…)``.
    ``lines``: one message per observation (role user/tool, no kind marks) and a
    ``- ID rN [lifecycle]: BODY`` frame list.
    ``compiler``: the real :mod:`protocol.compiler` (maintenance: a threshold so low that
    any input is under pressure).
    """
    if style == "compiler":
        from protocol.compiler import CompilerConfig, compile_input

        config = CompilerConfig(maintenance_at=0.001, resume_at=0.001) if maintenance else None
        return ctx.backend.read(lambda v: compile_input(v, session="main", config=config))
    state = ctx.state()
    events = [e for e in state["events"] if e["lifecycle"] == "active"]
    frames = [ctx.frame(f["id"]) for f in state["frames"] if f["lifecycle"] != "retired"]
    present = {f["id"] for f in frames}
    relations = [r for r in state["relations"] if r[0] in present and r[2] in present]
    system = {
        "role": "system",
        "content": "You are an agent with Morphz memory. "
        "Refer to observations as @eN and frames by id; write (context-tx …) via context_tx.",
    }
    messages: list[dict[str, Any]] = [system]
    if style == "sexp":
        lines = ["# Observations"]
        for e in events:
            meta = ctx.event(e["ref"])
            marks = [e["kind"]]
            if e["kind"] == "user_message":
                marks.append("delivered" if meta["delivered"] else "undelivered")
            text = ctx.read_event(e["ref"])["text"]
            lines.append(f"{e['ref']} [{', '.join(marks)}] {text}")
        lines.append("# Frames")
        for f in frames:
            src = f" (from {' '.join(f['sources'])})" if f["sources"] else ""
            life = "" if f["lifecycle"] == "active" else f" (lifecycle {f['lifecycle']})"
            lines.append(f"(frame {f['id']} (revision {f['revision']}){life}{src} {f['body']})")
        lines.append("# Relations")
        lines += [f"({a} {label} {b})" for a, label, b in relations]
        lines.append(f"# Runtime\n(version {state['version']}) (tick {state['tick']})")
        messages.append({"role": "user", "content": "\n".join(lines)})
    else:
        for e in events:
            role = "user" if e["kind"] == "user_message" else "tool"
            messages.append(
                {"role": role, "content": f"{e['ref']}: {ctx.read_event(e['ref'])['text']}"}
            )
        lines = ["frames:"]
        for f in frames:
            lines.append(f"- {f['id']} r{f['revision']} [{f['lifecycle']}]: {f['body']}")
            if f["sources"]:
                lines.append(f"  sources: {', '.join(f['sources'])}")
        lines.append("relations:")
        lines += [f"- {a} {label} {b}" for a, label, b in relations]
        lines.append(f"runtime: version {state['version']}, tick {state['tick']}")
        messages.append({"role": "user", "content": "\n".join(lines)})
    return CompiledInput(
        messages=tuple(messages),
        tokens=1000,
        prefix_tokens=300,
        capacity=capacity(maintenance),
        version=state["version"],
        tick=state["tick"],
        session="main",
        frames_present=tuple(f["id"] for f in frames),
        events_present=tuple(e["ref"] for e in events),
        maintenance_batch=batch,
    )


def commit_all(ctx: Context, turn: ModelTurn) -> None:
    for tx in turn.transactions:
        receipt = ctx.commit(tx)
        assert receipt.status == "committed", (tx, receipt.errors)


def canonical(text: str, ctx: Context, seed_base: int, **refs: str) -> str:
    """The seed transaction with the store's refs and version, in canonical text."""
    text = text.replace(f"(base-version {seed_base})", f"(base-version {ctx.version()})")
    for seed_ref, ref in refs.items():
        text = text.replace("@" + seed_ref, ref)
    return print_tx(parse_tx(text))


# -- the OpenAI-compatible client -------------------------------------------------


@pytest.fixture
def server() -> Iterator[Loopback]:
    with Loopback() as lb:
        yield lb


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(server: Loopback, **options: Any) -> tuple[OpenAIChatModel, Sleeps]:
    sleeps = Sleeps()
    config = ModelConfig(
        base_url=server.base_url,
        model="qwen3-8b",
        api_key=SecretStr(KEY),
        timeout_s=5.0,
        max_retries=2,
        backoff_s=0.25,
    )
    return OpenAIChatModel(config, sleep=sleeps, **options), sleeps


def test_context_tx_call_becomes_a_transaction_and_the_request_is_well_formed(
    server: Loopback,
) -> None:
    tx = "(context-tx (base-version 3) (derive release (from @e1) (goal ship-v1)))"
    server.script(tools_answer(call("context_tx", {"tx": tx}, "call_1")))
    model, sleeps = client(server)

    turn = model.respond(SIMPLE, (PACKAGE_TOOL,))

    assert turn == ModelTurn(transactions=(tx,))
    assert server.problems == [] and sleeps == []
    (req,) = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == f"Bearer {KEY}"
    assert req.headers["Content-Type"] == "application/json"
    body = req.body
    assert body["model"] == "qwen3-8b"
    assert body["messages"] == [dict(m) for m in SIMPLE.messages]
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == [*MEMORY_TOOLS, "package"]
    assert body["tools"][-1] == PACKAGE_TOOL
    assert body["tools"][0]["function"]["parameters"]["required"] == ["tx"]
    assert body["tool_choice"] == "auto" and body["temperature"] == 0.0
    assert "max_tokens" not in body


def test_plain_content_is_a_reply(server: Loopback) -> None:
    server.script(text_answer("v1 is packaged."))
    model, _ = client(server)
    turn = model.respond(SIMPLE, ())
    assert turn.action == Reply(text="v1 is packaged.")
    assert turn.finish == "done" and turn.transactions == ()
    assert [t["function"]["name"] for t in server.requests[0].body["tools"]] == list(MEMORY_TOOLS)


def test_external_tool_call_is_the_action_with_a_transaction_beside_it(server: Loopback) -> None:
    tx = "(context-tx (base-version 3) (derive test-result (from @e2) (tests passed)))"
    server.script(
        tools_answer(
            call("context_tx", {"tx": tx}, "c1"),
            call("package", {"target": "ship-v1"}, "c2"),
            content="Tests passed; packaging.",
        )
    )
    model, _ = client(server, max_output_tokens=512)
    turn = model.respond(SIMPLE, (PACKAGE_TOOL,))
    assert turn.action == ToolCall(name="package", arguments={"target": "ship-v1"}, call_id="c2")
    assert turn.transactions == (tx,)
    assert turn.finish == "continue"
    assert server.requests[0].body["max_tokens"] == 512


def test_memory_calls_and_extra_external_calls(
    server: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        tools_answer(
            call("recall", {"request": {"frame_id": "release", "depth": 2}}, "r1"),
            call("deploy", {"env": "prod"}, "x1"),
            call("search", {"query": "cn-shanghai"}, "s1"),
            call("notify", {}, "x2"),
            call("read_event", {"ref": "@e2", "offset": 0, "length": 100}, "e1"),
            content="Let me look first.",
        )
    )
    model, _ = client(server)
    with caplog.at_level(logging.INFO, logger="agents.models"):
        turn = model.respond(
            SIMPLE, ({"name": "deploy", "parameters": {"type": "object"}}, {"name": "notify"})
        )
    assert turn.action == ToolCall(name="deploy", arguments={"env": "prod"}, call_id="x1")
    assert [(c.name, c.call_id) for c in turn.memory_calls] == [
        ("recall", "r1"),
        ("search", "s1"),
        ("read_event", "e1"),
    ]
    assert turn.memory_calls[0].arguments == {"request": {"frame_id": "release", "depth": 2}}
    assert "notify" in caplog.text and "dropped" in caplog.text
    sent = [t["function"] for t in server.requests[0].body["tools"][4:]]
    assert sent == [
        {"name": "deploy", "parameters": {"type": "object"}},
        {"name": "notify", "parameters": {"type": "object", "properties": {}}},
    ]


def test_maintenance_mode_offers_only_memory_tools_and_drops_external_calls(
    server: Loopback,
) -> None:
    server.script(
        tools_answer(
            call("package", {}, "p"),
            call("context_tx", {"tx": "(context-tx (base-version 3) (retire @e2))"}),
        )
    )
    model, _ = client(server)
    turn = model.respond(compiled(list(SIMPLE.messages), maintenance=True), (PACKAGE_TOOL,))
    assert turn.action is None
    assert turn.transactions == ("(context-tx (base-version 3) (retire @e2))",)
    assert [t["function"]["name"] for t in server.requests[0].body["tools"]] == list(MEMORY_TOOLS)


def test_500_then_200_is_retried_with_backoff(server: Loopback) -> None:
    server.script(
        error_answer(500, "upstream exploded"), error_answer(502, "bad gateway"), text_answer("ok")
    )
    model, sleeps = client(server)
    assert model.respond(SIMPLE, ()).action == Reply(text="ok")
    assert len(server.requests) == 3
    assert sleeps == [0.25, 0.5]  # exponential backoff


def test_429_is_retried_and_retry_after_is_honoured(server: Loopback) -> None:
    server.script(
        error_answer(
            429, "Rate limit exceeded", "rate_limit_exceeded", headers={"Retry-After": "2"}
        ),
        text_answer("ok"),
    )
    model, sleeps = client(server)
    assert model.respond(SIMPLE, ()).action == Reply(text="ok")
    assert sleeps == [2.0]


def test_retries_exhausted_is_a_model_error(server: Loopback) -> None:
    server.script(*[error_answer(503, "overloaded")] * 3)
    model, sleeps = client(server)
    with pytest.raises(RequestError) as err:
        model.respond(SIMPLE, ())
    assert err.value.code == "model_error"
    assert "3 attempts" in err.value.message and "HTTP 503" in err.value.message
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_slow_response_times_out_and_is_retried(server: Loopback) -> None:
    server.script(Answer(body=None, delay_s=3.0), text_answer("fast now"))
    model, sleeps = client(server, timeout_s=0.3)
    assert model.respond(SIMPLE, ()).action == Reply(text="fast now")
    assert len(server.requests) == 2 and sleeps == [0.25]


def test_connection_refused_is_retried_then_fails(server: Loopback) -> None:
    model, sleeps = client(server, base_url="http://127.0.0.1:9/v1", max_retries=1)
    with pytest.raises(RequestError) as err:
        model.respond(SIMPLE, ())
    assert err.value.code == "model_error" and "connection" in err.value.message
    assert sleeps == [0.25]


@pytest.mark.parametrize(
    "answer",
    [
        error_answer(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9001 tokens.",
            "context_length_exceeded",
        ),
        error_answer(
            400,
            "This model's maximum context length is 4096 tokens. However, you requested "
            "5000 tokens (4900 in the messages, 100 in the completion).",
            None,
        ),
        error_answer(
            400, "The decoder prompt (length 9000) is longer than the maximum model length of 8192."
        ),
        Answer(status=400, body={"error": "the input length exceeds the context length"}),
        Answer(
            status=500, body={"error": {"message": "input length exceeds maximum context length"}}
        ),
        error_answer(
            400,
            "the request exceeds the available context size, try increasing it",
            "exceed_context_size_error",
        ),
        error_answer(400, "prompt is too long: 210000 tokens > 200000 maximum"),
        Answer(status=413, body={"error": {"message": "Request Entity Too Large"}}),
    ],
)
def test_input_overflow_is_not_retried(server: Loopback, answer: Answer) -> None:
    server.script(answer, text_answer("never"))
    model, sleeps = client(server)
    with pytest.raises(InputOverflow) as err:
        model.respond(SIMPLE, ())
    assert err.value.code == "input_overflow"
    assert len(server.requests) == 1 and sleeps == []


@pytest.mark.parametrize(
    ("status", "code", "message", "expected"),
    [
        (504, None, "upstream request took too long", False),
        (429, "context_length_exceeded", "tokens per minute", False),
        (400, None, "max_tokens must be at least 1", False),
        (401, None, "invalid api key", False),
        (
            422,
            None,
            "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
            "Given: 5000 `inputs` tokens. input is too long",
            True,
        ),
        (503, None, "model is loading, context window warming", True),
    ],
)
def test_overflow_wording(status: int, code: str | None, message: str, expected: bool) -> None:
    assert is_overflow(status, code, message) is expected


def test_other_http_errors_are_model_errors_without_the_key(
    server: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        error_answer(401, f"Incorrect API key provided: {KEY}", "invalid_api_key"),
        error_answer(500, f"boom {KEY}"),
        error_answer(404, "The model `nope` does not exist"),
    )
    model, _ = client(server, max_retries=1)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(RequestError) as first:
            model.respond(SIMPLE, ())
        with pytest.raises(RequestError) as second:
            model.respond(SIMPLE, ())
    assert first.value.code == "model_error" and "HTTP 401" in first.value.message
    assert len(server.requests) == 3  # 401 is not retried; 500 then 404
    assert "HTTP 404" in second.value.message and "does not exist" in second.value.message
    assert KEY not in first.value.message and KEY not in second.value.message
    assert KEY not in caplog.text
    assert KEY not in repr(model) and KEY not in repr(model.config) and KEY not in str(model.config)


def test_bad_answers_are_model_errors(server: Loopback) -> None:
    server.script(Answer(body=["not", "an", "object"]), Answer(body={"choices": []}))
    model, _ = client(server)
    for _ in range(2):
        with pytest.raises(RequestError) as err:
            model.respond(SIMPLE, ())
        assert err.value.code == "model_error"


def test_malformed_arguments_reach_the_runtime_as_text() -> None:
    raw = "(context-tx (base-version 3) (retire @e2))"
    answer = tools_answer(
        call("context_tx", raw),
        call("read_event", "{oops"),
        {
            "id": "o",
            "type": "function",
            "function": {"name": "package", "arguments": {"target": "x"}},
        },
    ).body
    turn = parse_answer(answer)
    assert turn.transactions == (raw,)
    assert turn.memory_calls[0].arguments == {"_raw": "{oops"}
    assert turn.action == ToolCall(name="package", arguments={"target": "x"}, call_id="o")


def test_content_parts_and_memory_only_turns() -> None:
    parts = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Paused. "},
                        {"type": "text", "text": "Tests passed."},
                    ],
                }
            }
        ]
    }
    assert parse_answer(parts).action == Reply(text="Paused. Tests passed.")
    thinking = tools_answer(
        call("recall", {"request": {"frame_id": "release"}}), content="Looking it up"
    ).body
    assert parse_answer(thinking).action is None


def test_config_from_environment() -> None:
    env = {
        "MORPHZ_MODEL_BASE_URL": "http://gpu-1:8000/v1",
        "MORPHZ_MODEL": "qwen3-8b",
        "MORPHZ_MODEL_API_KEY": "k1",
        "OPENAI_BASE_URL": "https://ignored/v1",
        "OPENAI_API_KEY": "ignored",
    }
    config = ModelConfig.from_env(env)
    assert (config.base_url, config.model) == ("http://gpu-1:8000/v1", "qwen3-8b")
    assert config.api_key is not None and config.api_key.get_secret_value() == "k1"
    assert config.endpoint == "http://gpu-1:8000/v1/chat/completions"

    fallback = ModelConfig.from_env(
        {
            "MORPHZ_MODEL": "gpt-4o-mini",
            "OPENAI_API_KEY": "k2",
            "OPENAI_BASE_URL": "https://gw.example/v1/",
            "MORPHZ_MODEL_API_KEY": "",
        }
    )
    assert fallback.api_key is not None and fallback.api_key.get_secret_value() == "k2"
    assert fallback.endpoint == "https://gw.example/v1/chat/completions"

    local = ModelConfig.from_env(
        {"MORPHZ_MODEL": "llama3.2"},
        base_url="http://localhost:11434/v1",
        timeout_s=5,
        context_delta=True,
    )
    assert local.api_key is None and local.context_delta and local.timeout_s == 5
    assert ModelConfig.from_env({}, model="m").base_url == "https://api.openai.com/v1"

    with pytest.raises(RequestError) as err:
        ModelConfig.from_env({"OPENAI_API_KEY": "k"})
    assert err.value.code == "model_config"
    with pytest.raises(RequestError) as err:
        ModelConfig.from_env({"MORPHZ_MODEL": "m"}, timeout_s=-1)
    assert err.value.code == "model_config" and "timeout_s" in err.value.message


def test_client_reads_the_process_environment(
    server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MORPHZ_MODEL_BASE_URL", server.base_url)
    monkeypatch.setenv("MORPHZ_MODEL", "env-model")
    monkeypatch.delenv("MORPHZ_MODEL_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.script(text_answer("hi"))
    model = OpenAIChatModel()
    assert model.respond(SIMPLE, ()).action == Reply(text="hi")
    assert server.requests[0].body["model"] == "env-model"
    assert "Authorization" not in server.requests[0].headers


def test_adapters_do_not_import_ray() -> None:
    code = (
        "import sys, agents.models, agents.scripted;"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the scripted model: reading a compiled input ---------------------------------


def test_scene_reads_observations_frames_and_version(ctx: Context) -> None:
    request = ctx.observe("user_message", "Ship v1 once the regression tests pass.")
    report = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed\nsee log")
    ctx.claim()
    ctx.commit(
        f"(context-tx (base-version 0) (derive release (from {request.ref}) "
        "(goal ship-v1) (stage awaiting-tests)))"
    )
    for style in STYLES:
        scene = read_scene(render(ctx, style=style))
        assert scene.version == 1
        assert [o.ref for o in scene.observations] == [request.ref, report.ref]
        user, tool = scene.observations
        assert (user.kind, tool.kind) == ("user_message", "tool_result")
        assert user.text.endswith("Ship v1 once the regression tests pass.")
        assert "412 passed" in tool.text and "see log" in tool.text and "release" not in tool.text
        release = scene.frame("release")
        assert release is not None and release.revision == 1
        assert release.get("stage") == "awaiting-tests" and release.get("goal") == "ship-v1"
        assert len(release.body) == 2
        if style != "lines":
            assert user.delivered is False and release.sources == (request.ref,)


def test_scene_without_present_lists_reads_line_headers_and_frame_forms() -> None:
    text = (
        "- @e4 (tool_result): region=cn-shanghai\n- @e5 (user_message, delivered): deploy\n"
        "(frame deployment/target-v1 (revision 3) (lifecycle retiring) (fact (region cn-hangzhou)))\n"
        "Note that deployment/target-v1 (old) was chosen by @e5."
    )
    scene = read_scene(compiled([{"role": "user", "content": text}]))
    assert [(o.ref, o.kind, o.delivered) for o in scene.observations] == [
        ("@e4", "tool_result", None),
        ("@e5", "user_message", True),
    ]
    assert scene.observations[0].text.endswith("region=cn-shanghai")
    frame = scene.frame("deployment/target-v1")
    assert frame is not None and frame.revision == 3 and frame.lifecycle == "retiring"
    assert not scene.has("deployment/target-v1")
    assert frame.body == tuple(read_forms("(fact (region cn-hangzhou))"))


# -- the scripted model: policies and steps ----------------------------------------


def test_steps_are_played_in_order_and_maintenance_drops_external_actions() -> None:
    package = ToolCall(name="package", arguments={})
    model = ScriptedModel(
        [
            ModelTurn(action=package),
            lambda scene: ModelTurn(
                action=package, transactions=(build_tx(scene, "processed", Retire(refs=("@e1",))),)
            ),
            ModelTurn(action=Reply(text="done"), finish="done"),
        ]
    )
    assert model.respond(SIMPLE, ()).action == package
    second = model.respond(compiled(list(SIMPLE.messages), version=7, maintenance=True), ())
    assert second.action is None
    assert parse_tx(second.transactions[0]).base_version == 7
    assert model.respond(SIMPLE, ()).action == Reply(text="done")
    assert model.respond(SIMPLE, ()) == ModelTurn(finish="done")
    assert model.calls == 4
    only_action = ScriptedModel([ModelTurn(action=package)])
    assert only_action.respond(compiled(list(SIMPLE.messages), maintenance=True), ()) == ModelTurn(
        finish="done"
    )
    with pytest.raises(TypeError):
        ScriptedModel([1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        ScriptedModel(42)  # type: ignore[arg-type]
    assert ScriptedModel(first_match()).respond(SIMPLE, ()) == ModelTurn(finish="done")


DEPLOY_TX = """(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2 (from @e42 deployment/target-v1) (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""


@pytest.mark.parametrize("style", STYLES)
def test_release_story(ctx: Context, style: str) -> None:
    model = ScriptedModel(release_policy())
    request = ctx.observe("user_message", "Please ship v1 once the regression tests pass.")
    ctx.claim()

    plan = model.respond(render(ctx, style=style), (PACKAGE_TOOL,))
    assert isinstance(plan.action, ToolCall) and plan.action.name == "run_tests"
    commit_all(ctx, plan)
    assert ctx.frame("release")["body"] == "(goal ship-v1) (stage awaiting-tests)"
    assert ctx.frame("release")["sources"] == [request.ref]

    report = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed\n" * 50)
    ctx.claim()
    view = render(ctx, style=style)
    turn = model.respond(view, (PACKAGE_TOOL,))
    assert turn == model.respond(view, (PACKAGE_TOOL,))  # pure and deterministic
    assert turn.transactions == (canonical(RELEASE_TX, ctx, 12, e42=report.ref),)
    assert turn.action == ToolCall(
        name="package",
        arguments={"target": "ship-v1"},
        call_id=f"package-v{ctx.version()}",
        irreversible=True,
        idempotency_key="package:ship-v1",
    )
    commit_all(ctx, turn)
    # R10: the memory says "tests passed; prepare to package", not "packaged".
    assert ctx.frame("release")["body"] == "(goal ship-v1) (stage packaging)"
    assert ctx.event(report.ref)["lifecycle"] == "retired"

    # Called again before the tool answered: the same deduplicated package action.
    again = model.respond(render(ctx, style=style), (PACKAGE_TOOL,))
    assert again.transactions == () and isinstance(again.action, ToolCall)
    assert again.action.idempotency_key == "package:ship-v1"

    result = ctx.observe("tool_result", "package: built dist/app-1.0.0.tgz (sha256 9a1f)")
    ctx.claim()
    final = model.respond(render(ctx, style=style), (PACKAGE_TOOL,))
    assert final.action == Reply(
        text="ship-v1: tests passed and the package is built.", request_ref=request.ref
    )
    assert final.finish == "done"
    commit_all(ctx, final)
    release = ctx.frame("release")
    assert (release["revision"], release["body"]) == (3, "(goal ship-v1) (stage packaged)")
    assert result.ref in release["sources"]
    assert ctx.event(result.ref)["lifecycle"] == "retired"
    assert ["test-result", "supports", "release"] in ctx.state()["relations"]

    assert model.respond(render(ctx, style=style), ()) == ModelTurn(finish="done")
    ctx.deliver(request.ref)
    if style != "lines":  # that layout does not show delivery
        tidy = model.respond(render(ctx, style=style), ())
        assert tidy.action is None
        commit_all(ctx, tidy)
        assert ctx.event(request.ref)["lifecycle"] == "retired"


@pytest.mark.parametrize("style", ["sexp", "compiler"])
def test_release_in_maintenance_defers_the_package_action(ctx: Context, style: str) -> None:
    model = ScriptedModel(release_policy())
    request = ctx.observe("user_message", "Ship v1.")
    ctx.claim()
    commit_all(ctx, model.respond(render(ctx, style=style), ()))
    report = ctx.observe("tool_result", "412 passed")
    ctx.claim()

    view = render(ctx, style=style, maintenance=True, batch=(report.ref,))
    assert view.capacity.maintenance
    turn = model.respond(view, (PACKAGE_TOOL,))
    assert turn.action is None
    assert turn.transactions == (canonical(RELEASE_TX, ctx, 12, e42=report.ref),)
    commit_all(ctx, turn)
    assert model.respond(render(ctx, style=style, maintenance=True), ()) == ModelTurn(finish="done")

    resumed = model.respond(render(ctx, style=style), (PACKAGE_TOOL,))
    assert isinstance(resumed.action, ToolCall) and resumed.action.name == "package"
    assert resumed.transactions == ()
    assert ctx.event(request.ref)["lifecycle"] == "active"  # still causally protected


@pytest.mark.parametrize("style", ["sexp", "compiler"])
def test_maintenance_sweep_retires_observations_frames_cite(ctx: Context, style: str) -> None:
    run = ctx.observe("tool_result", "npm test: ok; npm run build: ok")
    note = ctx.observe("external", "unrelated note")
    ctx.claim()
    ctx.commit(
        f"(context-tx (base-version 0) (derive release-case-a (from {run.ref}) (layout single-package)))"
    )
    model = ScriptedModel(consolidation_policy())
    assert model.respond(render(ctx, style=style), ()) == ModelTurn(
        finish="done"
    )  # not in maintenance
    turn = model.respond(render(ctx, style=style, maintenance=True), ())
    assert parse_tx(turn.transactions[0]).ops == (Retire(refs=(run.ref,)),)
    commit_all(ctx, turn)
    assert ctx.event(run.ref)["lifecycle"] == "retired"
    assert ctx.event(note.ref)["lifecycle"] == "active"


@pytest.mark.parametrize("style", ["sexp", "compiler"])
def test_failed_tests_block_the_release(ctx: Context, style: str) -> None:
    model = ScriptedModel(release_policy())
    request = ctx.observe("user_message", "Ship v1.")
    ctx.claim()
    commit_all(ctx, model.respond(render(ctx, style=style), ()))
    ctx.observe("tool_result", "regression suite: 409 passed, 3 failed")
    ctx.claim()
    turn = model.respond(render(ctx, style=style), (PACKAGE_TOOL,))
    assert isinstance(turn.action, Reply) and turn.action.request_ref == request.ref
    commit_all(ctx, turn)
    assert ctx.frame("release")["body"] == "(goal ship-v1) (stage blocked)"
    assert ctx.frame("test-result")["body"] == "(tests failed) (failures 3)"


@pytest.mark.parametrize("style", STYLES)
def test_deployment_story(ctx: Context, style: str) -> None:
    model = ScriptedModel(deployment_policy())
    ctx.observe("user_message", "Deploy the service to cn-hangzhou.")
    ctx.claim()
    first = model.respond(render(ctx, style=style), ())
    assert first.action is None
    commit_all(ctx, first)
    assert ctx.frame("deployment/target-v1")["body"] == "(fact (region cn-hangzhou))"

    config = ctx.observe("tool_result", "production config: region=cn-shanghai")
    ctx.claim()
    turn = model.respond(render(ctx, style=style), ())
    assert turn.transactions == (canonical(DEPLOY_TX, ctx, 17, e42=config.ref),)
    assert turn.action is None
    commit_all(ctx, turn)
    assert ctx.frame("deployment/target-v1")["lifecycle"] == "retired"  # through its successor
    assert ctx.frame("deployment/target-v2")["body"] == "(fact (region cn-shanghai))"
    assert ctx.event(config.ref)["lifecycle"] == "retired"

    same = ctx.observe("tool_result", "production config: region=cn-shanghai (unchanged)")
    ctx.claim()
    confirm = model.respond(render(ctx, style=style), ())
    assert parse_tx(confirm.transactions[0]).ops == (Retire(refs=(same.ref,)),)
    commit_all(ctx, confirm)
    assert model.respond(render(ctx, style=style), ()) == ModelTurn(finish="done")


@pytest.mark.parametrize("style", STYLES)
def test_consolidation_story(ctx: Context, style: str) -> None:
    run_a = ctx.observe("tool_result", "npm test: ok; npm run build: ok; dist/ verified")
    run_b = ctx.observe("tool_result", "pnpm --filter web test: ok; build ok; apps/web/dist/ ok")
    ctx.claim()
    ctx.commit(f"""(context-tx (base-version 0)
      (derive release-case-a (from {run_a.ref}) (layout single-package) (test "npm test")
        (build "npm run build") (artifact "dist/") (outcome passed))
      (derive release-case-b (from {run_b.ref}) (layout workspace) (test "pnpm --filter web test")
        (build "pnpm --filter web build") (artifact "apps/web/dist/") (outcome passed))
      (retire {run_a.ref} {run_b.ref}))""")
    model = ScriptedModel(consolidation_policy())

    turn = model.respond(render(ctx, style=style), ())

    assert turn.transactions == (canonical(CONSOLIDATE_TX, ctx, 42),)
    commit_all(ctx, turn)
    for case in ("release-case-a", "release-case-b"):
        assert ctx.frame(case)["lifecycle"] == "retired"
    assert ctx.frame("release-procedure")["sources"] == ["release-case-a", "release-case-b"]
    assert model.respond(render(ctx, style=style), ()) == ModelTurn(finish="done")


def pause_setup(ctx: Context) -> tuple[str, str, str]:
    request = ctx.observe("user_message", "Ship v1.")
    ctx.claim()
    ctx.commit(
        f"(context-tx (base-version 0) (derive release (from {request.ref}) "
        "(goal ship-v1) (stage awaiting-tests)))"
    )
    report = ctx.observe("tool_result", "regression suite: 412 passed, 0 failed")
    pause = ctx.observe("user_message", "Pause the release for now.")
    ctx.claim()
    return request.ref, report.ref, pause.ref


@pytest.mark.parametrize("style", ["sexp", "compiler"])
def test_pause_after_a_conflict_holds_tests_passed_and_paused(ctx: Context, style: str) -> None:
    _, _, pause = pause_setup(ctx)
    tester, pauser = ScriptedModel(release_policy()), ScriptedModel(pause_policy())
    view = render(ctx, style=style)  # both threads read the same version
    test_turn = tester.respond(view, (PACKAGE_TOOL,))
    pause_turn = pauser.respond(view, ())
    assert pause_turn.action is None
    assert ctx.commit(test_turn.transactions[0]).status == "committed"

    rejected = ctx.commit(pause_turn.transactions[0])
    assert rejected.status == "rejected"
    assert [c.id for c in rejected.conflicts] == ["release"]

    retry = pauser.respond(render(ctx, style=style), ())  # re-read and rebuild
    rebuilt = parse_tx(retry.transactions[0])
    assert rebuilt.base_version == ctx.version()
    assert rebuilt.ops[0].sources == (pause, "test-result")  # type: ignore[union-attr]
    commit_all(ctx, retry)
    body = ctx.frame("release")["body"]
    assert body == "(goal ship-v1) (stage paused) (tests passed) (resume-at packaging)"

    reply = pauser.respond(render(ctx, style=style), ())
    assert reply.action == Reply(
        text="The release is paused. Tests passed; packaging waits.", request_ref=pause
    )
    # The testing thread re-reads too: the release is paused, so nothing is packaged.
    assert tester.respond(render(ctx, style=style), (PACKAGE_TOOL,)) == ModelTurn(finish="done")
    ctx.deliver(pause)
    tidy = pauser.respond(render(ctx, style=style), ())
    assert parse_tx(tidy.transactions[0]).ops == (Retire(refs=(pause,)),)


@pytest.mark.parametrize("style", ["sexp", "compiler"])
def test_tests_arriving_after_a_pause_keep_it_paused(ctx: Context, style: str) -> None:
    _, report, _ = pause_setup(ctx)
    tester, pauser = ScriptedModel(release_policy()), ScriptedModel(pause_policy())
    view = render(ctx, style=style)
    commit_all(ctx, pauser.respond(view, ()))
    stale = tester.respond(view, (PACKAGE_TOOL,))
    assert ctx.commit(stale.transactions[0]).status == "rejected"

    retry = tester.respond(render(ctx, style=style), (PACKAGE_TOOL,))
    assert retry.action is None  # paused: no packaging
    commit_all(ctx, retry)
    assert ctx.frame("release")["body"] == (
        "(goal ship-v1) (resume-at awaiting-tests) (stage paused) (tests passed)"
    )
    assert ctx.frame("test-result")["sources"] == [report]
    assert ctx.event(report)["lifecycle"] == "retired"


def test_scene_follows_the_compilers_context_delta(ctx: Context) -> None:
    from protocol.compiler import Compiler, CompilerConfig

    compiler = Compiler(CompilerConfig(context_delta=True))
    request = ctx.observe("user_message", "Ship v1.")
    ctx.claim()
    model = ScriptedModel(release_policy())
    first = ctx.backend.read(lambda v: compiler.compile(v, session="main"))
    commit_all(ctx, model.respond(first, ()))
    report = ctx.observe("tool_result", "regression suite: 412 passed")
    ctx.claim()
    second = ctx.backend.read(lambda v: compiler.compile(v, session="main", previous=first))
    assert second.encoding == "delta"
    scene = read_scene(second)
    release = scene.frame("release")
    assert release is not None and release.revision == 1
    assert release.body == tuple(read_forms("(goal ship-v1) (stage awaiting-tests)"))
    assert [o.ref for o in scene.observations] == [request.ref, report.ref]
    turn = model.respond(second, (PACKAGE_TOOL,))
    assert turn.transactions == (canonical(RELEASE_TX, ctx, 12, e42=report.ref),)
    commit_all(ctx, turn)

    third = ctx.backend.read(lambda v: compiler.compile(v, session="main", previous=second))
    assert third.encoding == "delta"
    release = read_scene(third).frame("release")
    assert release is not None and release.revision == 2 and release.get("stage") == "packaging"
    assert report.ref not in third.events_present
    assert [o.ref for o in read_scene(third).observations] == [request.ref]


def test_pause_with_no_release_says_so(ctx: Context) -> None:
    pause = ctx.observe("user_message", "暂停 the release, please pause it")
    ctx.claim()
    turn = ScriptedModel(pause_policy()).respond(render(ctx, style="compiler"), ())
    assert turn.action == Reply(
        text="There is no release in progress to pause.", request_ref=pause.ref
    )


def test_scripted_model_is_a_model() -> None:
    from protocol.turns import Model

    models: list[Model] = [ScriptedModel(release_policy()), OpenAIChatModel(ModelConfig(model="m"))]
    assert all(callable(m.respond) for m in models)
    assert json.dumps(MEMORY_TOOL_SPECS)  # JSON-ready
