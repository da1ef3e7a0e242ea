"""``morphz mcp --http`` over an enforcing context actor: every client authenticates.

The server (a child process) holds no token of its own: each MCP client (the SDK's,
over streamable HTTP) sends its capability as a bearer token, the server verifies it
(signature, expiry, revocation, this context) and forwards it with each call, so the
actor checks what that client may do. Without a valid token nothing is served.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from actors.server.connect import connect
from actors.server.guard import issue_capability, revoke_token
from morphz.cli.main import cli
from protocol import capabilities
from tests.actors.cluster import RayCluster
from tests.servers.test_mcp import doc, http_server, tx

pytestmark = pytest.mark.subprocess


@asynccontextmanager
async def _client(url: str, token: bytes | None) -> AsyncIterator[Client]:
    """An SDK client over streamable HTTP sending *token* as its bearer token."""
    headers = {}
    if token is not None:
        headers["Authorization"] = "Bearer " + base64.urlsafe_b64encode(token).decode().rstrip("=")
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, read_timeout_seconds=120) as client:
            yield client


def test_http_clients_bring_their_own_verified_tokens(
    ray_cluster: RayCluster, tmp_path: Path, context_name: str, namespace: str
) -> None:
    handle = connect(
        context_name, store_dir=tmp_path, namespace=namespace, tenant="acme", enforce=True
    )

    def token(holder: str, ops: list[str], context: str = context_name) -> bytes:
        return issue_capability(tmp_path, holder=holder, tenant="acme", grants=[(context, ops)])

    reader, writer = token("reader", ["read"]), token("writer", ["read", "commit"])
    elsewhere = token("other", ["read", "commit", "admin"], context="another-context")
    forged = bytearray(writer)
    forged[-5] ^= 1
    revoked = token("gone", ["read", "commit"])
    revoke_token(tmp_path, capabilities.decode(revoked).token_id)
    address = ray_cluster.cluster.address

    async def refused(url: str, credential: bytes | None) -> None:
        with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in a group
            async with _client(url, credential) as c:
                await c.call_tool("state", {})

    async def main(url: str) -> None:
        bare = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
        assert bare.status_code == 401 and "Bearer" in bare.headers["www-authenticate"]
        random = {"Authorization": "Bearer " + base64.urlsafe_b64encode(b"x" * 90).decode()}
        assert httpx.post(url, json={}, headers=random, timeout=30).status_code == 401
        for credential in (None, bytes(forged), elsewhere, revoked, b"any base64 string"):
            await refused(url, credential)
        async with _client(url, reader) as c:
            assert doc(await c.call_tool("state", {}))["version"] == 0
            denied = await c.call_tool("commit", {"tx": tx(0, "(derive x (x))")})
            assert denied.is_error and "permission_denied" in str(doc(denied))
            observed = await c.call_tool("observe", {"text": "a reader cannot write"})
            assert observed.is_error
        async with _client(url, writer) as c:
            done = doc(await c.call_tool("commit", {"tx": tx(0, "(derive note (by writer))")}))
            assert done["status"] == "committed"

    with http_server(tmp_path, context=context_name, RAY_ADDRESS=address) as url:
        anyio.run(main, url)
    assert handle.with_capability(reader).version() == 1  # only the writer's commit
    assert [f["id"] for f in handle.with_capability(reader).state().frames] == ["note"]
    assert handle.with_capability(reader).state().events == []


def test_http_never_runs_on_a_token_of_its_own(tmp_path: Path) -> None:
    """The old hole: any base64 string as --capability counted as enforcement off loopback,
    and the server then called the store with it for every network client."""
    runner = CliRunner()
    args = ["--store", str(tmp_path), "mcp", "--create", "--http"]
    anything = base64.b64encode(b"anything at all").decode()
    result = runner.invoke(cli, [*args, "0.0.0.0:0", "--capability", anything])
    assert result.exit_code == 2 and "bad_argument" in result.output
    result = runner.invoke(cli, [*args, "127.0.0.1:0", "--capability", anything])
    assert result.exit_code == 2 and "Authorization: Bearer" in result.output
    result = runner.invoke(cli, [*args, "0.0.0.0:0"])
    assert result.exit_code == 1 and "insecure_bind" in result.output
    assert not (tmp_path / "default").exists()  # nothing was created or served
