"""Many MCP clients, one memory: ``morphz mcp`` processes sharing a context through its actor.

The context actor runs on the session's Ray cluster and holds the store; each
MCP server is a child process (one per client, as stdio hosts spawn them),
one given ``RAY_ADDRESS``, the other finding the actor through the advert it
writes into the store. Their writes are conflict-checked by the actor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from actors.server.connect import connect
from actors.server.guard import issue_capability
from tests.actors.cluster import RayCluster
from tests.servers.test_mcp import doc, stdio_client, text, tx

pytestmark = pytest.mark.subprocess


def clients(store: Path, context: str, address: str, *args: str) -> tuple[Client, Client]:
    """Two stdio MCP servers on *context*: one given RAY_ADDRESS, one finding the advert."""
    return (
        stdio_client(store, *args, context=context, RAY_ADDRESS=address),
        stdio_client(store, *args, context=context),
    )


def test_two_clients_share_one_context_through_its_actor(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    handle = connect(context_name, store_dir=tmp_path, namespace=namespace)
    a_client, b_client = clients(tmp_path, context_name, ray_cluster.cluster.address)

    async def main() -> None:
        async with a_client as a, b_client as b:
            ref = doc(await a.call_tool("observe", {"text": "deploy region: cn-shanghai"}))["ref"]
            base = doc(await b.call_tool("state", {}))["version"]

            # Same frame, same base, at once: exactly one commits, the other is rejected
            # with the conflict as a result; its retry on the current version commits.
            results: dict[str, Any] = {}

            async def put(name: str, client: Client, body: str) -> None:
                op = f"(derive region (from {ref}) (region {body}))"
                results[name] = doc(await client.call_tool("commit", {"tx": tx(base, op)}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(put, "a", a, '"cn-shanghai"')
                tg.start_soon(put, "b", b, '"cn-beijing"')
            statuses = sorted(r["status"] for r in results.values())
            assert statuses == ["committed", "rejected"]
            loser_name = next(n for n, r in results.items() if r["status"] == "rejected")
            loser = results[loser_name]
            assert loser["conflicts"] == [{"id": "region", "version": base + 1}]
            again = a if loser_name == "a" else b
            now = doc(await again.call_tool("frame", {"id": "region"}))
            assert now["revision"] == 1
            retry = doc(
                await again.call_tool(
                    "commit", {"tx": tx(now["updated_version"], '(revise region (region "both"))')}
                )
            )
            assert retry["status"] == "committed" and retry["version"] == base + 2

            # Different frames on one stale base: both commit, the later one rebased.
            base2 = retry["version"]
            first = doc(await a.call_tool("commit", {"tx": tx(base2, "(derive a-note (a))")}))
            second = doc(await b.call_tool("commit", {"tx": tx(base2, "(derive b-note (b))")}))
            assert first["status"] == second["status"] == "committed"
            assert (first["rebased"], second["rebased"]) == (False, True)
            assert second["version"] == base2 + 2

    anyio.run(main)
    # Nothing lost: the actor's context holds every write, in order.
    assert handle.frame("region").body == '(region "both")'
    assert [w.op for w in handle.history("region")] == ["derive", "revise"]
    assert {f["id"] for f in handle.state().frames} == {"region", "a-note", "b-note"}


def test_capability_scopes_what_the_server_may_do(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    handle = connect(
        context_name, store_dir=tmp_path, namespace=namespace, tenant="acme", enforce=True
    )
    reader = tmp_path / "reader.cap"
    reader.write_bytes(
        issue_capability(
            tmp_path, holder="mcp-reader", tenant="acme", grants=[(context_name, ["read"])]
        )
    )
    address = ray_cluster.cluster.address
    with_token = stdio_client(
        tmp_path, "--capability", str(reader), context=context_name, RAY_ADDRESS=address
    )
    without = stdio_client(tmp_path, context=context_name, RAY_ADDRESS=address)

    async def main() -> None:
        async with with_token as client:
            assert doc(await client.call_tool("state", {}))["version"] == 0
            denied = await client.call_tool("commit", {"tx": tx(0, "(derive x (x))")})
            assert denied.is_error and "denied" in text(denied)
            refused = await client.call_tool("observe", {"text": "not allowed"})
            assert refused.is_error and "denied" in text(refused)
        async with without as client:
            assert (await client.call_tool("state", {})).is_error

    anyio.run(main)
    assert handle.with_capability(reader.read_bytes()).state().version == 0
    assert handle.with_capability(reader.read_bytes()).state().events == []


def test_mcp_clients_reach_a_context_active_on_a_host(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    from actors.server.hosting import start_host

    host = start_host("mcp-h", store_dir=tmp_path, namespace=namespace)
    try:
        handle = host.context(context_name)
        neighbour = host.context("neighbour")  # another context in the same process
        a_client, b_client = clients(tmp_path, context_name, ray_cluster.cluster.address)

        async def main() -> None:
            async with a_client as a, b_client as b:
                first = doc(await a.call_tool("commit", {"tx": tx(0, "(derive via-a (a))")}))
                second = doc(await b.call_tool("commit", {"tx": tx(0, "(derive via-b (b))")}))
                assert first["status"] == second["status"] == "committed"
                assert doc(await b.call_tool("state", {}))["version"] == 2

        anyio.run(main)
        assert handle.version() == 2 and handle.frame("via-b").body == "(b)"
        assert neighbour.version() == 0  # the host kept the two apart
        assert {c["name"] for c in host.contexts()} == {context_name, "neighbour"}
    finally:
        host.shutdown()
