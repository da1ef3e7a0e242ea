"""``morphz serve --enforce`` at its edge, attacked with real clients (httpx, a raw socket).

One Ray Serve app for the module, serving with capabilities enforced (tenant ``acme``)
a store whose first context was made before the server existed, embedded, as ``morphz
init`` or ``morphz mcp`` make one. Every refusal is checked for its typed error and for
nothing having changed.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from servers.edge import bearer
from service.store import open_context
from tests.actors.cluster import RayCluster
from tests.servers.test_http import _error, _free_port

pytestmark = pytest.mark.filterwarnings(
    # Ray Serve's own models, on import (not ours): targeted, never a blanket ignore.
    "ignore:Using extra keyword arguments on `Field`:pydantic.warnings.PydanticDeprecatedSince20"
)

OLD = "made-by-cli"
"""The context made embedded before the server started (never served by an actor)."""


@dataclass(frozen=True)
class Enforcing:
    """The running enforcing app."""

    url: str
    port: int
    store: Path
    namespace: str


@pytest.fixture(scope="module")
def enforcing(
    ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Enforcing]:
    from ray import serve

    from servers.http_api import serve_app

    store = tmp_path_factory.mktemp("edge-store")
    with open_context(store, OLD, create=True) as ctx:
        ctx.observe("tool_result", "the launch code is 0000")
    namespace = "morphz-edge-" + uuid.uuid4().hex[:8]
    port = _free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    app = serve_app(
        store,
        namespace=namespace,
        node_id=ray_cluster.head_node_id,
        enforce=True,
        tenant="acme",
        hosts=("memory.example",),
    )
    serve.run(app, name="morphz-edge-test", route_prefix="/")
    try:
        yield Enforcing(f"http://127.0.0.1:{port}", port, store, namespace)
    finally:
        serve.shutdown()


@pytest.fixture
def client(enforcing: Enforcing) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=enforcing.url, timeout=60) as c:
        yield c


def _token(server: Enforcing, grants: list[tuple[str, list[str]]], holder: str = "agent") -> str:
    from actors.server.guard import issue_capability

    return bearer(issue_capability(server.store, holder=holder, tenant="acme", grants=grants))


def test_a_context_made_before_the_server_is_served_enforcing(
    client: httpx.Client, enforcing: Enforcing
) -> None:
    base = f"/v1/contexts/{OLD}"
    denied = _error(client.get(base + "/state"), 401, "permission_denied")
    assert "0000" not in str(denied)
    _error(client.get(base + "/events/@e1"), 401, "permission_denied")
    reader = {"Authorization": _token(enforcing, [(OLD, ["read"])])}
    tx = {"text": "(context-tx (base-version 0) (derive pwned (by attacker)))"}
    _error(client.post(base + "/transactions", json=tx, headers=reader), 403, "permission_denied")
    other = {"Authorization": _token(enforcing, [("elsewhere", ["read", "commit"])])}
    _error(client.get(base + "/state", headers=other), 403, "permission_denied")
    state = client.get(base + "/state", headers=reader)
    assert state.status_code == 200 and state.json()["version"] == 0
    assert len(state.json()["events"]) == 1
    from actors.client.lookup import lookup

    assert lookup(OLD, enforcing.namespace, store_dir=enforcing.store).handshake()["enforce"]


def test_an_actor_already_serving_without_enforcement_is_refused(
    client: httpx.Client, enforcing: Enforcing
) -> None:
    from actors import connect

    name = "open-" + uuid.uuid4().hex[:8]
    opened = connect(name, store_dir=enforcing.store, namespace=enforcing.namespace)
    try:
        admin = {"Authorization": _token(enforcing, [("*", ["read", "commit", "admin"])])}
        base = f"/v1/contexts/{name}"
        _error(client.get(base + "/state", headers=admin), 409, "scope_mismatch")
        tx = {"text": "(context-tx (base-version 0) (derive note (x)))"}
        _error(client.post(base + "/transactions", json=tx, headers=admin), 409, "scope_mismatch")
        assert opened.version() == 0  # nothing reached the open actor
    finally:
        opened.shutdown()


def test_the_list_of_contexts_shows_only_what_the_token_may_see(
    client: httpx.Client, enforcing: Enforcing
) -> None:
    mine, theirs = ("t-" + uuid.uuid4().hex[:8] for _ in range(2))
    maker = {"Authorization": _token(enforcing, [("*", ["admin"])], holder="ops")}
    for name in (mine, theirs):
        r = client.post("/v1/contexts", json={"name": name}, headers=maker)
        assert r.status_code == 201, r.text
    _error(client.get("/v1/contexts"), 401, "permission_denied")
    _error(client.get("/v1/contexts", headers={"Authorization": "Bearer AAAA"}), 403)
    reader = {"Authorization": _token(enforcing, [(mine, ["read"])])}
    listed = client.get("/v1/contexts", headers=reader)
    assert listed.status_code == 200, listed.text
    assert [c["name"] for c in listed.json()["contexts"]] == [mine]
    # creating needs admin: a reader's POST makes nothing
    made = client.post("/v1/contexts", json={"name": "t-rogue"}, headers=reader)
    _error(made, 403, "permission_denied")
    everything = client.get("/v1/contexts", headers=maker).json()["contexts"]
    assert {mine, theirs} <= {c["name"] for c in everything} and "t-rogue" not in str(everything)
    # the inspector's list of contexts is the same: only what the token reads
    seen = client.get("/inspect/api/", headers=reader)
    assert seen.status_code == 200, seen.text
    assert [c["name"] for c in seen.json()["contexts"]] == [mine]


def _raw(port: int, head: str, body: bytes) -> bytes:
    """Send *head* and the first bytes of a body it announces as much longer; the reply
    read without ever sending the rest (a server that reads the body first never answers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head.encode("latin-1") + b"\r\n" + body)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def _head(path: str, length: int, *extra: str) -> str:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *extra,
    ]
    return "\r\n".join(lines) + "\r\n"


def test_the_token_is_checked_before_the_body_is_read(enforcing: Enforcing) -> None:
    path = f"/v1/contexts/{OLD}/transactions"
    start = b'{"text": "(context-tx (base-version 0) (derive pwned (x' + b" " * 64
    forged = _token(enforcing, [(OLD, ["commit"])])[:-6] + "AAAAAA"
    reader = _token(enforcing, [(OLD, ["read"])])
    for auth, status in [(None, 401), (forged, 403), (reader, 403)]:
        extra = () if auth is None else (f"Authorization: {auth}",)
        reply = _raw(enforcing.port, _head(path, 1 << 20, *extra), start)
        assert reply.startswith(f"HTTP/1.1 {status}".encode()), reply[:200]
    writer = _token(enforcing, [(OLD, ["commit"])])
    # an allowed token with a body announced over the cap: 413 before any byte is read
    reply = _raw(enforcing.port, _head(path, 8 << 20, f"Authorization: {writer}"), b"")
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    reader_headers = {"Authorization": reader}
    state = httpx.get(f"{enforcing.url}/v1/contexts/{OLD}/state", headers=reader_headers)
    assert state.json()["version"] == 0


def test_an_allowed_host_is_answered_and_a_foreign_one_is_not(
    client: httpx.Client, enforcing: Enforcing
) -> None:
    reader = _token(enforcing, [(OLD, ["read"])])
    ok: Any = client.get(
        f"/v1/contexts/{OLD}/state", headers={"Authorization": reader, "host": "memory.example"}
    )
    assert ok.status_code == 200, ok.text
    foreign = client.get(
        f"/v1/contexts/{OLD}/state", headers={"Authorization": reader, "host": "evil.example"}
    )
    _error(foreign, 421, "bad_host")
