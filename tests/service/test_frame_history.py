"""``frame_history``: every revision of a frame with who wrote it, when and why — one
registry entry (service/operations.py), reachable on the embedded API and as an MCP tool
here, on the Ray handle and over HTTP in ``test_frame_history_ray``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from protocol.errors import NotFound, OutOfRange, RequestError
from servers.mcp_server import Memory, build_server
from service.context import Context
from service.queries import FrameRevision
from service.store import open_context


def story(ctx: Any) -> float:
    """Derive the candidate ``plan`` (client ``c-1``), revise it, accept it by a human review; the time
    before the first commit."""
    ref = ctx.observe("recall_result", "deploy to cn-shanghai")["ref"]  # unreviewed
    ctx.claim()
    started = time.time()
    ctx.submit(
        f'(context-tx (base-version {ctx.version()}) (reason "first plan")'
        f" (derive plan (from {ref}) (region cn-shanghai)))",
        "c-1",
    )
    ctx.submit(
        f'(context-tx (base-version {ctx.version()}) (reason "moved")'
        " (revise plan (region cn-beijing)))",
        "c-2",
    )
    ctx.review("plan", "accept", "alice", reason="looks right")
    return started


def check_revisions(revisions: list[Any], started: float, tick: int) -> None:
    assert [type(r) for r in revisions] == [FrameRevision] * 3
    first, second, review = revisions
    assert (first.op, first.revision, first.body) == ("derive", 1, "(region cn-shanghai)")
    assert (first.who, first.reason, first.kind) == ("c-1", "first plan", "model")
    assert (second.op, second.revision, second.body, second.reason) == (
        "revise",
        2,
        "(region cn-beijing)",
        "moved",
    )
    assert second.who == "c-2"
    assert second.version == first.version + 1 and second.base_version == first.version
    assert (review.kind, review.op, review.who) == ("governance", "accept", "human:alice")
    assert all(started <= (r.time or 0) <= time.time() for r in revisions)
    assert [r.tick for r in revisions] == [tick] * 3


@pytest.fixture
def ctx(tmp_path: Path) -> Any:
    c = open_context(tmp_path, "c", sync=False)
    yield c
    c.close()


def test_every_revision_with_who_when_and_why(ctx: Context) -> None:
    started = story(ctx)
    check_revisions(ctx.frame_history("plan"), started, ctx.tick())
    # The same writes as history, with the writer and the time beside each.
    assert [(r.version, r.op) for r in ctx.frame_history("plan")] == [
        (h.version, h.op) for h in ctx.history("plan")
    ]


def test_bad_arguments_are_typed_errors_and_read_nothing(ctx: Context) -> None:
    with pytest.raises(NotFound):
        ctx.frame_history("nope")
    with pytest.raises(RequestError) as info:
        ctx.frame_history(42)
    assert info.value.code == "bad_argument"
    with pytest.raises(OutOfRange):
        ctx.frame_history("x" * 5000)
    with pytest.raises(RequestError):
        ctx.frame_history("plan", "extra")


def test_an_mcp_tool_made_from_the_registry(ctx: Context) -> None:
    started = story(ctx)
    server = build_server(Memory(ctx, via="store", context="c"))

    async def go() -> tuple[Any, Any, Any]:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            ok = await client.call_tool("frame_history", {"frame_id": "plan"})
            missing = await client.call_tool("frame_history", {"frame_id": "nope"})
            return tools["frame_history"], ok, missing

    tool, ok, missing = anyio.run(go)
    assert tool.input_schema["required"] == ["frame_id"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert not ok.is_error
    check_revisions(
        [FrameRevision.model_validate(r) for r in ok.structured_content["result"]],
        started,
        ctx.tick(),
    )
    assert missing.is_error and missing.structured_content["error"]["code"] == "not_found"


@pytest.fixture
def handle(ray_cluster: Any, tmp_path: Path, context_name: str, namespace: str) -> Any:
    from actors import connect

    h = connect(context_name, store_dir=tmp_path / "ray", namespace=namespace)
    yield h
    h.shutdown()


@pytest.mark.ray
def test_the_same_on_the_ray_handle_blocking_and_async(handle: Any) -> None:
    started = story(handle)
    revisions = handle.frame_history("plan")
    check_revisions(revisions, started, handle.tick())
    assert anyio.run(handle.frame_history.aio, "plan") == revisions
    assert anyio.run(handle.frame_history_async, "plan") == revisions
    with pytest.raises(NotFound):
        handle.frame_history("nope")
    with pytest.raises(OutOfRange):
        handle.frame_history("x" * 5000)


@pytest.mark.ray
def test_an_http_route_made_from_the_registry(handle: Any) -> None:
    from fastapi.testclient import TestClient

    from servers.http_api import create_app

    class One:
        enforced = False

        def handle(self, name: str) -> Any:
            if name != handle.name:
                raise NotFound(f"no context {name!r}")
            return handle

    started = story(handle)
    with TestClient(create_app(One()), base_url="http://127.0.0.1") as client:  # type: ignore[arg-type]
        base = f"/v1/contexts/{handle.name}/frames"
        ok = client.get(f"{base}/plan/revisions")
        missing = client.get(f"{base}/nope/revisions")
        too_long = client.get(f"{base}/{'x' * 5000}/revisions")
        unknown = client.get(f"{base}/plan/revisions", params={"depth": 2})
        schema = client.get("/openapi.json").json()
    assert ok.status_code == 200, ok.text
    check_revisions(
        [FrameRevision.model_validate(r) for r in ok.json()["revisions"]], started, handle.tick()
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert too_long.status_code == 422 and too_long.json()["error"]["code"] == "out_of_range"
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "bad_argument"
    entry = schema["paths"]["/v1/contexts/{context}/frames/{frame_id}/revisions"]["get"]
    assert [(p["name"], p["in"]) for p in entry["parameters"]] == [
        ("context", "path"),
        ("frame_id", "path"),
    ]
    assert {"200", "404", "422"} <= set(entry["responses"])
    error = entry["responses"]["404"]["content"]["application/json"]["schema"]
    assert error["$ref"].endswith("/ErrorReply")
