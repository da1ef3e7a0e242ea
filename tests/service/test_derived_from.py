"""``derived_from``: the frames citing a source, on the embedded API, the HTTP route and
the MCP tool made from its one declaration (the Ray handle runs its example in the shape
tests)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from protocol.errors import NotFound, RequestError
from servers.http_api import ActorResolver, create_app
from servers.mcp_server import Memory, build_server
from service.context import Context
from service.store import open_context


def story(ctx: Context) -> str:
    """``a`` from an observation, ``b`` from ``a``, ``c`` from both, ``c`` retiring."""
    ref = ctx.observe("tool_result", "build 412 passed").ref
    ctx.claim()
    ctx.submit(
        f"(context-tx (base-version 0) (derive a (from {ref}) (x 1)) (derive b (from a) (y 2))"
        f" (derive c (from a {ref}) (z 3)))"
    )
    ctx.submit("(context-tx (base-version 1) (retire c))")  # retiring: a window of ticks
    return ref


def test_the_frames_citing_a_frame_or_an_event(tmp_path: Path) -> None:
    ctx = open_context(tmp_path, "c", sync=False)
    try:
        ref = story(ctx)
        assert [(d.id, d.lifecycle) for d in ctx.derived_from("a")] == [
            ("b", "active"),
            ("c", "retiring"),
        ]
        event_id = ctx.event(ref).id
        assert [d.id for d in ctx.derived_from(ref)] == ["a", "c"]
        assert ctx.derived_from(event_id) == ctx.derived_from(ref)
        assert ctx.derived_from("b") == []
        before = ctx.version()
        with pytest.raises(NotFound):
            ctx.derived_from("nope")
        with pytest.raises(RequestError) as bad:
            ctx.derived_from(["a"])  # type: ignore[arg-type]
        assert bad.value.code == "bad_argument"
        assert ctx.version() == before
    finally:
        ctx.close()


def test_the_route_and_the_tool_made_from_its_declaration(tmp_path: Path) -> None:
    ctx = open_context(tmp_path, "c", sync=False)
    story(ctx)

    async def main() -> None:
        async with Client(build_server(Memory(ctx, via="store", context="c"))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["derived_from"].input_schema["required"] == ["source"]
            result = await client.call_tool("derived_from", {"source": "a"})
            assert [d["id"] for d in json.loads(result.content[0].text)["result"]] == ["b", "c"]
            missing = await client.call_tool("derived_from", {"source": "nope"})
            assert missing.is_error and "not_found" in missing.content[0].text

    try:
        anyio.run(main)
    finally:
        ctx.close()
    # The HTTP route (served through a context actor: called in tests/servers/test_http.py's
    # way for every registered route; here, its OpenAPI entry).
    schema = create_app(ActorResolver(str(tmp_path), "derived")).openapi()
    route = schema["paths"]["/v1/contexts/{context}/derived/{source}"]["get"]
    assert [p["name"] for p in route["parameters"]] == ["context", "source"]
    reply = route["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert schema["components"]["schemas"][reply.rsplit("/", 1)[1]]["required"] == ["frames"]
