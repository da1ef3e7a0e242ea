"""Branches through the network ports, driven by real clients: the MCP SDK over stdio
(``morphz mcp``) and httpx against the HTTP API on Ray Serve. Both serve the registered
operations (``branch``, ``diff_context``, ``merge_context``, ``pick``, ``tag``, ``tags``,
``revert``), so the same story runs on each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from service.store import Store
from tests.servers.test_http import Server, _new_context, server  # noqa: F401
from tests.servers.test_mcp import doc, stdio_client, text

pytestmark = pytest.mark.filterwarnings(
    # Ray Serve's own models, on import (not ours), as in tests/servers/test_http.py.
    "ignore:Using extra keyword arguments on `Field`:pydantic.warnings.PydanticDeprecatedSince20"
)


def seed(store: Path) -> None:
    """``default`` with a keyed frame ``plan``; the MCP server then serves it."""
    with Store(store).open("default") as ctx:
        ctx.commit("(context-tx (base-version 0) (derive plan (status draft) (owner ann)))")


def test_mcp_branch_diff_merge_tag_revert(tmp_path: Path) -> None:
    seed(tmp_path)

    async def main() -> None:
        async with stdio_client(tmp_path) as client:
            made = doc(await client.call_tool("branch", {"new": "alt"}))
            assert made["context"] == "alt" and made["version"] == 1
            # The fork's own work, as another agent would do it: its store beside ours.
            with Store(tmp_path).open("alt") as alt:
                alt.commit("(context-tx (base-version 1) (set plan (status ready)) (derive x (y)))")
            await client.call_tool(
                "commit", {"tx": "(context-tx (base-version 1) (set plan (status hold)))"}
            )
            diff = doc(await client.call_tool("diff_context", {"source": "alt"}))
            statuses = {f["id"]: f["status"] for f in diff["frames"]}
            assert statuses == {"plan": "conflict", "x": "added"}
            refused = doc(await client.call_tool("merge_context", {"source": "alt"}))
            assert refused["status"] == "refused" and refused["unresolved"] == ["plan"]
            merged = doc(
                await client.call_tool(
                    "merge_context", {"source": "alt", "resolutions": {"plan": "theirs"}}
                )
            )
            assert merged["status"] == "merged" and merged["versions"] == [3]
            assert doc(await client.call_tool("tag", {"name": "merged"}))["version"] == 3
            listed = doc(await client.call_tool("tags", {}))
            assert listed["result"] == [{"name": "merged", "version": 3}], listed
            undone = doc(await client.call_tool("revert", {"from_version": 3, "to_version": 3}))
            assert undone["status"] == "merged" and set(undone["applied"]) == {"plan", "x"}
            bad = await client.call_tool("merge_context", {"source": "alt", "strategy": "maybe"})
            assert bad.is_error and "strategy" in text(bad)
            missing = await client.call_tool("diff_context", {"source": "nowhere"})
            assert missing.is_error and "nowhere" in text(missing)

    anyio.run(main)
    with Store(tmp_path).open("default", readonly=True) as ctx:
        assert ctx.frame("plan")["body"] == "(status hold) (owner ann)"
        assert ctx.txlog(3)["merge"]["source"] == "alt"


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:  # noqa: F811
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def test_http_branch_diff_merge_tag(http: httpx.Client) -> None:
    name = _new_context(http)
    base = f"/v1/contexts/{name}"
    tx = "(context-tx (base-version 0) (derive plan (status draft)))"
    r = http.post(base + "/transactions", json={"text": tx})
    assert r.status_code == 200 and r.json()["status"] == "committed", r.text
    fork = name + "-alt"
    r = http.post(base + "/branch", json={"new": fork})
    assert r.status_code == 201 and r.json()["origin"] == name, r.text
    idea = "(context-tx (base-version 1) (derive idea (x)))"
    r = http.post(f"/v1/contexts/{fork}/transactions", json={"text": idea})
    assert r.status_code == 200 and r.json()["status"] == "committed", r.text
    d: dict[str, Any] = http.get(f"{base}/diff/{fork}").json()
    assert [(f["id"], f["status"]) for f in d["frames"]] == [("idea", "added")]
    dry = http.post(base + "/merge", json={"source": fork, "dry_run": True}).json()
    assert dry["status"] == "dry_run" and http.get(base + "/state").json()["version"] == 1
    done = http.post(base + "/merge", json={"source": fork}).json()
    assert done["status"] == "merged" and done["applied"] == ["idea"]
    r = http.post(base + "/tags", json={"name": "after-merge"})
    assert r.status_code == 201 and r.json() == {"name": "after-merge", "version": 2}
    past = http.get(f"{base}/state/at/1").json()
    assert [f["id"] for f in past["frames"]] == ["plan"]
    bad = http.post(base + "/merge", json={"source": fork, "strategy": "maybe"})
    assert bad.status_code == 422, bad.text
    assert http.get(base + "/state").json()["version"] == 2
