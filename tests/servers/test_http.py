"""The HTTP API (servers/http_api.py) as a real Ray Serve application on loopback, driven by httpx.

One Serve app for the module (started on a free port of 127.0.0.1 in the session cluster,
shut down at the end); every test uses contexts of its own.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from protocol.errors import RequestError
from servers.binding import check_bind
from servers.edge import REQUEST_HEADER
from servers.http_api import bearer
from tests.actors.cluster import RayCluster

pytestmark = pytest.mark.filterwarnings(
    # Ray Serve's own models, on import (not ours): targeted, never a blanket ignore.
    "ignore:Using extra keyword arguments on `Field`:pydantic.warnings.PydanticDeprecatedSince20"
)


@dataclass(frozen=True)
class Server:
    """The running app: its base URL, store directory and Ray namespace."""

    url: str
    store: Path
    namespace: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from ray import serve

    from servers.http_api import serve_app

    store = tmp_path_factory.mktemp("http-store")
    namespace = "morphz-http-" + uuid.uuid4().hex[:8]
    port = _free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    app = serve_app(store, namespace=namespace, node_id=ray_cluster.head_node_id)
    serve.run(app, name="morphz-test", route_prefix="/")
    try:
        yield Server(f"http://127.0.0.1:{port}", store, namespace)
    finally:
        serve.shutdown()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    # A non-browser client: it marks its writes with the header no cross-site page can send.
    with httpx.Client(base_url=server.url, timeout=60, headers={REQUEST_HEADER: "1"}) as c:
        yield c


def _new_context(client: httpx.Client) -> str:
    name = "h-" + uuid.uuid4().hex[:10]
    r = client.post("/v1/contexts", json={"name": name})
    assert r.status_code == 201, r.text
    return name


def _error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    doc = r.json()
    assert set(doc) == {"error"} and {"code", "message"} <= set(doc["error"]), doc
    if code is not None:
        assert doc["error"]["code"] == code, doc
    return dict(doc["error"])


def _version(client: httpx.Client, name: str) -> int:
    return int(client.get(f"/v1/contexts/{name}/state").json()["version"])


# -- the document and the contexts --------------------------------------------------


def test_openapi_document_and_docs_are_served(client: httpx.Client) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["info"]["title"] == "Morphz"
    paths = doc["paths"]
    for path in (
        "/v1/contexts",
        "/v1/contexts/{context}/transactions",
        "/v1/contexts/{context}/frames/{frame_id}",
        "/v1/contexts/{context}/frames/{frame_id}/history",
        "/v1/contexts/{context}/events/{ref}",
        "/v1/contexts/{context}/review/{frame_id}",
    ):
        assert path in paths, path
    assert set(paths["/v1/contexts/{context}/search"]) == {"get", "post"}
    post = paths["/v1/contexts/{context}/transactions"]["post"]
    body = post["requestBody"]["content"]
    assert body["text/plain"]["schema"]["type"] == "string"
    header = next(p for p in post["parameters"] if p["name"] == "Idempotency-Key")
    assert header["in"] == "header"
    replies = post["responses"]
    assert replies["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Receipt")
    for status in ("404", "409", "422", "503"):
        ref = replies[status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorReply"), status
    schemas = doc["components"]["schemas"]
    assert "error" in schemas["ErrorReply"]["properties"]
    assert "HTTPValidationError" not in str(replies)
    # what Swagger's "Try it out" sends: the example, as text/plain, with the key
    name = _new_context(client)
    tried = client.post(
        f"/v1/contexts/{name}/transactions",
        content=body["text/plain"]["example"],
        headers={"content-type": "text/plain", header["name"]: header["example"]},
    )
    assert tried.status_code == 200, tried.text
    assert tried.json()["status"] == "committed" and tried.json()["client_id"] == "note-1"
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_contexts_create_list_and_refusals(client: httpx.Client, server: Server) -> None:
    name = _new_context(client)
    listed = client.get("/v1/contexts").json()["contexts"]
    assert {"name": name, "served": True} in listed
    _error(client.post("/v1/contexts", json={"name": name}), 409, "exists")
    _error(client.post("/v1/contexts", json={"name": "../escape"}), 422)
    _error(client.post("/v1/contexts", json={"name": "x", "extra": 1}), 422, "bad_request")
    _error(client.post("/v1/contexts", json={"name": "y", "window": "big"}), 422, "bad_request")
    _error(
        client.post("/v1/contexts", content=b"{", headers={"content-type": "application/json"}), 422
    )
    names = {c["name"] for c in client.get("/v1/contexts").json()["contexts"]}
    assert names.isdisjoint({"x", "y", "../escape"})  # nothing was created by bad input


def test_unknown_context_route_and_method(client: httpx.Client) -> None:
    _error(client.get("/v1/contexts/nobody-here/state"), 404, "not_found")
    _error(client.post("/v1/contexts/nobody-here/claim"), 404, "not_found")
    _error(client.get("/v1/nothing"), 404, "not_found")
    _error(client.delete("/v1/contexts"), 405)


# -- every route's success path ---------------------------------------------------------


def test_every_route_on_one_context(client: httpx.Client) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    r = client.post(
        base + "/observations",
        json={"kind": "tool_result", "text": "production config: region=cn-shanghai"},
    )
    assert r.status_code == 201, r.text
    ref = r.json()["ref"]
    claimed = client.post(base + "/claim").json()
    assert ref in claimed["claimed"] and claimed["advanced"]

    tx = f"(context-tx (base-version 0) (derive target (from {ref}) (region cn-shanghai)))"
    r = client.post(base + "/transactions", content=tx, headers={"content-type": "text/plain"})
    assert r.status_code == 200 and r.json()["status"] == "committed", r.text
    first = r.json()["version"]
    r = client.post(
        base + "/transactions",
        json={"text": f"(context-tx (base-version {first}) (revise target (region eu-west)))"},
    )
    assert r.json()["status"] == "committed", r.text
    json_form = {
        "base_version": r.json()["version"],
        "ops": [
            {"op": "derive", "id": "release", "sources": ["target"], "body": [["goal", "ship"]]}
        ],
    }
    r = client.post(base + "/transactions", json=json_form)
    assert r.json()["status"] == "committed", r.text

    frame = client.get(base + "/frames/target").json()
    assert frame["id"] == "target" and "eu-west" in frame["body"]
    old = client.get(base + "/frames/target", params={"version": first}).json()
    assert "cn-shanghai" in old["body"] and old["as_of"] == first
    history = client.get(base + "/frames/target/history").json()["history"]
    assert len(history) == 2

    event = client.get(f"{base}/events/{ref}").json()
    assert event["ref"] == ref and event["kind"] == "tool_result"
    chunk = client.get(f"{base}/events/{ref}", params={"offset": 11, "length": 6}).json()
    assert chunk["text"] == "config"

    state = client.get(base + "/state").json()
    assert {f["id"] for f in state["frames"]} >= {"target", "release"}

    found = client.get(base + "/search", params={"query": "region", "limit": 5}).json()
    assert "target" in found["recalled"]
    found = client.post(base + "/search", json={"query": "goal", "kinds": ["frame"]}).json()
    assert found["recalled"] == ["release"]
    page = client.post(
        base + "/recall", json={"frame_id": "target", "direction": "descendants", "max_nodes": 5}
    ).json()
    assert set(page["recalled"]) == {"target", "release"}

    marked = client.post(
        base + "/transactions",
        json={
            "text": f"(context-tx (base-version {state['version']}) (envelope release (trust candidate)))"
        },
    )
    assert marked.json()["status"] == "committed", marked.text
    pending = client.get(base + "/review").json()
    assert "release" in str(pending["items"])
    accepted = client.post(
        base + "/review/release", json={"decision": "accept", "reviewer": "ops:alice"}
    )
    assert accepted.status_code == 200 and accepted.json()["decision"], accepted.text
    again = client.post(base + "/review/release", json={"decision": "accept", "reviewer": "ops:a"})
    _error(again, 409, "not_reviewable")
    assert client.get(base + "/audit").json()["entries"]  # the review decision is audited
    after = client.get(base + "/audit", params={"after": 1_000_000}).json()["entries"]
    assert after == []


# -- error paths ---------------------------------------------------------------------------


def test_malformed_input_is_422_and_writes_nothing(client: httpx.Client) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    text = {"content-type": "text/plain"}
    bad = [
        client.post(base + "/transactions", content="(context-tx (base-version 0", headers=text),
        client.post(base + "/transactions", content=b"\xff\xfe", headers=text),
        client.post(base + "/transactions", content="(drop-table frames)", headers=text),
        client.post(base + "/transactions", json={"text": 42}),
        client.post(base + "/transactions", json={"base_version": 0, "ops": [], "evil": 1}),
        client.post(base + "/transactions", json={"base_version": "0", "ops": []}),
        client.post(base + "/transactions", json=[1, 2]),
        client.post(
            base + "/transactions", content=b"{nope", headers={"content-type": "application/json"}
        ),
        client.post(base + "/transactions", content=b"x", headers={"content-type": "image/png"}),
        client.post(base + "/transactions", content="(" * 50_000, headers=text),
        client.post(base + "/observations", json={"kind": "tool_result"}),
        client.post(base + "/observations", json={"kind": 3, "text": "t"}),
        client.post(base + "/observations", json={"kind": "k", "text": "t", "event_id": "bad"}),
        client.get(base + "/frames/x", params={"version": "abc"}),
        client.get(base + "/frames/x", params={"version": "-1"}),
        client.get(base + "/events/@e1", params={"offset": "-5"}),
        client.get(base + "/search", params={"query": "x", "limit": "100000"}),
        client.post(base + "/search", json={"query": "x", "drop": True}),
        client.post(base + "/search", json=["query"]),
        client.post(base + "/recall", json="frame"),
        client.post(base + "/review/x", json={"decision": "maybe", "reviewer": "ops:a"}),
    ]
    for r in bad:
        error = _error(r, 422)
        assert error["message"]
    _error(client.post(base + "/transactions", content="x" * (1 << 21), headers=text), 413)
    assert _version(client, name) == 0
    assert client.get(base + "/state").json()["events"] == []


def test_hostile_json_is_a_typed_422_and_writes_nothing(client: httpx.Client) -> None:
    """JSON's escapes and its laxities, read one way by every route. On main before this
    change a lone surrogate (``\\ud800``), ``since`` of 400 digits or ``kinds: [["x"]]``
    came back 503 ``actor_error`` (the actor's UnicodeEncodeError, OverflowError,
    TypeError), and a duplicate ``ops`` key committed whichever came last."""
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    json_type = {"content-type": "application/json"}

    def post(path: str, raw: bytes) -> httpx.Response:
        return client.post(base + path, content=raw, headers=json_type)

    cases = [
        (post("/observations", b'{"kind":"tool_result","text":"a\\ud800b"}'), "bad_argument"),
        (post("/observations", b'{"kind":"tool_result","text":"a","text":"b"}'), "wire_error"),
        (post("/observations", b'{"kind":"tool_result","text":NaN}'), "wire_error"),
        (post("/observations", b"[" * 100_000), "wire_error"),
        (post("/transactions", b'{"base_version":0,"ops":[],"ops":[{"op":"derive","id":"a"}]}'),
         "wire_error"),
        (post("/transactions", b'{"text":"(context-tx (base-version 0) (derive \\udfff))"}'),
         "bad_argument"),
        (post("/search", b'{"query":"\\ud800"}'), "bad_argument"),
        (post("/search", b'{"query":"a","since":' + b"9" * 400 + b"}"), "out_of_range"),
        (post("/search", b'{"query":"a","kinds":[["tool_result"]]}'), "bad_kind"),
        (post("/search", b'{"query":"a","limit":5,"limit":50}'), "wire_error"),
        (post("/recall", b'{"frame_id":"a","session":"\\ud800"}'), "bad_argument"),
    ]  # fmt: skip
    for r, code in cases:
        _error(r, 422, code)
    assert _version(client, name) == 0
    assert client.get(base + "/state").json()["events"] == []


def test_not_found_paths(client: httpx.Client) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    _error(client.get(base + "/frames/ghost"), 404, "not_found")
    _error(client.get(base + "/frames/ghost/history"), 404)
    _error(client.get(base + "/events/@e99"), 404, "not_found")
    _error(client.get(base + "/events/@e99", params={"offset": 0}), 404, "not_found")
    # a malformed reference is bad input (the CLI's exit 2), not an unknown one
    _error(client.get(base + "/events/e1"), 422, "bad_ref")
    _error(client.get(base + "/events/e1", params={"offset": 0}), 422, "bad_ref")


def test_a_rejected_transaction_is_409_with_its_receipt(client: httpx.Client) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    r = client.post(
        base + "/transactions", json={"text": "(context-tx (base-version 0) (revise ghost (a b)))"}
    )
    error = _error(r, 409)
    receipt = error["receipt"]
    assert receipt["status"] == "rejected" and receipt["errors"][0]["code"] == error["code"]
    assert _version(client, name) == 0


def test_transactions_sent_together_each_get_their_own_answer(
    client: httpx.Client, server: Server
) -> None:
    """Many clients at once (batched into submit_many on the replica): each request its own
    receipt, a rejected one 409, an unparsable one 422, a retried key its original receipt."""
    import asyncio

    name = _new_context(client)
    url = f"{server.url}/v1/contexts/{name}/transactions"
    headers = {REQUEST_HEADER: "1", "content-type": "text/plain"}
    texts = [f"(context-tx (base-version 0) (derive n{i} (step {i})))" for i in range(24)]
    texts[5] = "(context-tx (base-version 0) (revise nowhere (step 5)))"
    texts[6] = "(context-tx (base-version 0) (derive"
    keyed_text = "(context-tx (base-version 0) (derive keyed (once)))"

    async def crowd() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as c:
            sends = [c.post(url, content=t, headers=headers) for t in texts]
            sends.append(
                c.post(url, content=keyed_text, headers={**headers, "idempotency-key": "k1"})
            )
            sends.append(
                c.post(url, content=keyed_text, headers={**headers, "idempotency-key": "k1"})
            )
            return list(await asyncio.gather(*sends))

    got = asyncio.run(crowd())
    assert _error(got[5], 409)["receipt"]["status"] == "rejected"
    _error(got[6], 422)
    ok = [r.json() for i, r in enumerate(got[:24]) if i not in (5, 6)]
    assert all(r.status_code == 200 for i, r in enumerate(got[:24]) if i not in (5, 6))
    keyed = [got[24].json(), got[25].json()]
    assert (
        keyed[0]["version"] == keyed[1]["version"]
        and keyed[1]["duplicate"] != keyed[0]["duplicate"]
    )
    versions = sorted(r["version"] for r in ok) + [keyed[0]["version"]]
    assert sorted(versions) == list(range(1, 24))  # 22 + the keyed one, each once
    assert _version(client, name) == 23


def test_idempotency_key_replay_returns_the_original_receipt(client: httpx.Client) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    headers = {"content-type": "text/plain", "Idempotency-Key": "order-7f3a"}
    tx = "(context-tx (base-version 0) (derive note (stage one)))"
    first = client.post(base + "/transactions", content=tx, headers=headers)
    again = client.post(base + "/transactions", content=tx, headers=headers)
    assert first.status_code == again.status_code == 200
    one, two = first.json(), again.json()
    assert one["status"] == two["status"] == "committed"
    assert one["client_id"] == two["client_id"] == "order-7f3a"
    assert not one["duplicate"] and two["duplicate"] and two["version"] == one["version"]
    assert _version(client, name) == one["version"] == 1  # committed once
    assert len(client.get(base + "/frames/note/history").json()["history"]) == 1
    other = client.post(base + "/transactions", content=tx, headers={"Idempotency-Key": "x" * 500})
    _error(other, 422, "bad_client_id")
    # the key reused for another transaction: refused, and never "rebased"
    reused = client.post(
        base + "/transactions",
        content="(context-tx (base-version 0) (derive other (stage two)))",
        headers=headers,
    )
    refused = _error(reused, 409, "client_id_reused")
    assert refused["receipt"]["rebased"] is False


# -- capabilities --------------------------------------------------------------------------


def _enforced_context(server: Server) -> tuple[str, Any, bytes, bytes]:
    """A new context of tenant acme served enforcing capabilities: its name, its handle
    (as admin), an admin token and a read-only token."""
    from actors import connect
    from actors.server.guard import issue_capability

    name = "acme-" + uuid.uuid4().hex[:8]
    admin = issue_capability(
        server.store, holder="ops", tenant="acme", grants=[(name, ["read", "commit", "admin"])]
    )
    reader = issue_capability(server.store, holder="r", tenant="acme", grants=[(name, ["read"])])
    handle = connect(
        name,
        store_dir=server.store,
        namespace=server.namespace,
        tenant="acme",
        project="p",
        enforce=True,
        capability=admin,
    )
    return name, handle, admin, reader


def test_capabilities_401_403_and_allowed(client: httpx.Client, server: Server) -> None:
    name, handle, admin, reader = _enforced_context(server)
    try:
        base = f"/v1/contexts/{name}"
        tx = {"text": "(context-tx (base-version 0) (derive note (stage one)))"}
        _error(client.post(base + "/transactions", json=tx), 401, "permission_denied")
        _error(client.get(base + "/state"), 401, "permission_denied")
        as_reader = {"Authorization": bearer(reader)}
        _error(client.post(base + "/transactions", json=tx, headers=as_reader), 403)
        _error(client.get(base + "/audit", headers=as_reader), 403, "permission_denied")
        _error(client.get(base + "/state", headers={"Authorization": "Bearer !!"}), 403)
        _error(client.get(base + "/state", headers={"Authorization": "Basic abc"}), 403)
        forged = bytearray(reader)
        forged[-3] ^= 1
        _error(client.get(base + "/state", headers={"Authorization": bearer(bytes(forged))}), 403)
        assert handle.version() == 0  # nothing was committed by a refused call
        assert client.get(base + "/state", headers=as_reader).json()["version"] == 0
        ok = client.post(base + "/transactions", json=tx, headers={"Authorization": bearer(admin)})
        assert ok.status_code == 200 and ok.json()["status"] == "committed", ok.text
    finally:
        handle.shutdown()


# -- the edge: size, host, origin, cross-site writes ------------------------------------------


def test_an_8_mib_observation_is_413_whether_announced_or_streamed(client: httpx.Client) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    text = "A" * (8 << 20)
    _error(client.post(base + "/observations", json={"kind": "tool_result", "text": text}), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams
        yield b'{"kind": "tool_result", "text": "'
        for _ in range(128):
            yield b"A" * (64 << 10)
        yield b'"}'

    streamed = client.post(
        base + "/observations", content=chunks(), headers={"content-type": "application/json"}
    )
    _error(streamed, 413, "too_large")
    assert client.get(base + "/state").json()["events"] == []  # nothing was recorded
    small = client.post(base + "/observations", json={"kind": "tool_result", "text": "ok"})
    assert small.status_code == 201, small.text


TX = "(context-tx (base-version 0) (derive pwned (by attacker)))"


def test_a_cross_site_text_plain_write_commits_nothing(server: Server) -> None:
    """What a page on another site can make a browser send: a text/plain POST (no
    preflight), with its own Origin, or with a foreign Host after DNS rebinding."""
    with httpx.Client(base_url=server.url, timeout=60) as browser:  # no custom header
        name = _new_context(browser)
        url = f"/v1/contexts/{name}/transactions"
        plain = {"content-type": "text/plain"}
        _error(
            browser.post(url, content=TX, headers={**plain, "origin": "http://evil.example"}),
            403,
            "cross_origin",
        )
        _error(browser.post(url, content=TX, headers=plain), 403, "cross_site_write")
        _error(browser.post(f"/v1/contexts/{name}/claim"), 403, "cross_site_write")
        _error(
            browser.post(url, content=TX, headers={**plain, "sec-fetch-site": "cross-site"}),
            403,
        )
        rebound = {"host": "evil.example:80", REQUEST_HEADER: "1"}
        _error(browser.post(url, content=TX, headers={**plain, **rebound}), 421, "bad_host")
        _error(browser.post(url, json={"text": TX}, headers=rebound), 421, "bad_host")
        # DNS rebinding cannot read replies either: a foreign Host gets no state
        read = browser.get(f"/v1/contexts/{name}/state", headers={"host": "evil.example"})
        _error(read, 421, "bad_host")
        assert "version" not in read.text
        assert _version(browser, name) == 0
        # a same-origin page (the /docs "Try it out") and a marked client do write
        same = {**plain, "origin": server.url}
        assert browser.post(url, content=TX, headers=same).status_code == 200
        assert _version(browser, name) == 1


# -- safe by default -------------------------------------------------------------------------


def test_a_non_loopback_bind_is_refused_unless_enforced_or_insecure(tmp_path: Path) -> None:
    from morphz.cli.main import cli

    assert check_bind("127.0.0.1", False, False) == []
    with pytest.raises(RequestError) as err:
        check_bind("0.0.0.0", False, False)
    assert err.value.code == "insecure_bind"
    result = CliRunner().invoke(
        cli, ["--json", "--store", str(tmp_path), "serve", "--host", "0.0.0.0"]
    )
    assert result.exit_code == 1
    assert '"code": "insecure_bind"' in result.output
    result = CliRunner().invoke(
        cli, ["--json", "--store", str(tmp_path), "serve", "--host", "10.0.0.1", "--enforce"]
    )
    assert result.exit_code == 2 and "--tenant" in result.output  # refused before listening
    assert list(tmp_path.iterdir()) == []


# -- the web inspector behind the actors --------------------------------------------------


def test_the_inspector_reads_through_the_actors_and_their_guard(
    client: httpx.Client, server: Server
) -> None:
    name = _new_context(client)
    base = f"/v1/contexts/{name}"
    for text in (
        "(context-tx (base-version 0) (derive release (stage tests)) (derive ok (tests passed)))",
        "(context-tx (base-version 1) (revise release (stage packaging)) (relate ok supports release))",
    ):
        assert client.post(base + "/transactions", json={"text": text}).status_code == 200
    events = len(client.get(base + "/state").json()["events"])
    api = f"/inspect/api/c/{name}"
    graph = client.get(api + "/graph").json()
    assert {n["id"] for n in graph["nodes"]} == {"release", "ok"}
    assert graph["edges"] == [["ok", "supports", "release"]]
    assert client.get(api + "/graph?version=1").json()["edges"] == []
    assert [t["version"] for t in client.get(api + "/transactions").json()["transactions"]] == [
        2,
        1,
    ]
    assert "+(stage packaging)" in client.get(api + "/diff?id=release&a=1&b=2").json()["diff"]
    assert client.get(api + "/search?q=packaging").json()["hits"][0]["id"] == "release"
    assert client.get(api + "/metrics").json()["metrics"]["commits"] >= 2
    page = client.get(f"/inspect/c/{name}/graph")
    assert page.status_code == 200 and "cytoscape.min.js" in page.text
    assert client.get(f"/inspect/c/{name}/transactions").status_code == 200
    _error(client.get(api + "/graph?version=9"), 422, "future_version")
    assert client.get(f"/inspect/c/{name}/frame?id=ghost").status_code == 404
    state = client.get(base + "/state").json()
    assert state["version"] == 2 and len(state["events"]) == events  # the search recorded nothing

    secured, handle, admin, reader = _enforced_context(server)
    try:
        api = f"/inspect/api/c/{secured}"
        _error(client.get(api + "/graph"), 401, "permission_denied")
        assert client.get(f"/inspect/c/{secured}/graph").status_code == 401
        as_reader = {"Authorization": bearer(reader)}
        assert client.get(api + "/graph", headers=as_reader).status_code == 200
        _error(client.get(api + "/governance", headers=as_reader), 403, "permission_denied")
        _error(client.get(api + "/search?q=x", headers=as_reader), 403, "permission_denied")
        with httpx.Client(base_url=server.url, timeout=60) as browser:
            token = bearer(admin).split(" ", 1)[1]
            set_cookie = browser.post(  # as a browser posts the form: from its own origin
                "/inspect/capability", data={"token": token}, headers={"origin": server.url}
            )
            assert set_cookie.status_code == 303
            assert browser.get(api + "/governance").status_code == 200
        assert handle.version() == 0
    finally:
        handle.shutdown()


def test_the_inspector_lists_the_cluster_placement(client: httpx.Client, server: Server) -> None:
    import ray

    from actors import place
    from actors.cluster.directory_handle import directory

    assert client.get("/inspect/api/").json()["placement"] == []  # no directory yet
    d = directory(server.namespace)
    name = "placed-" + uuid.uuid4().hex[:8]
    handle = place(name, namespace=server.namespace, store_dir=str(server.store / "placed"))
    try:
        rows = client.get("/inspect/api/").json()["placement"]
        row = next(r for r in rows if r["name"] == name)
        assert row["primary"]["node_alive"] and row["primary"]["version"] == 0
        assert row["followers"] == []
        page = client.get("/inspect/")
        assert page.status_code == 200 and 'id="placement"' in page.text and name in page.text
    finally:
        handle.shutdown()
        d.remove(name)
        ray.kill(d.actor, no_restart=True)


def test_a_hosted_context_is_served_through_its_host(client: httpx.Client, server: Server) -> None:
    import ray

    from actors import place, start_host
    from actors.cluster.directory_handle import directory

    d = directory(server.namespace)
    host = start_host("http-h", store_dir=server.store, namespace=server.namespace)
    name = "hosted-" + uuid.uuid4().hex[:8]
    try:
        deadline = time.monotonic() + 15
        while not d.hosts():
            assert time.monotonic() < deadline, "the host never reported to the directory"
            time.sleep(0.1)
        place(name, hosted=True, namespace=server.namespace)
        host.deactivate(name)  # idle: the request activates it again, on its host
        base = f"/v1/contexts/{name}"
        tx = "(context-tx (base-version 0) (derive note (hosted yes)))"
        r = client.post(base + "/transactions", content=tx, headers={"content-type": "text/plain"})
        assert r.status_code == 200 and r.json()["status"] == "committed", r.text
        assert client.get(base + "/frames/note").json()["body"] == "(hosted yes)"
        assert _version(client, name) == 1
        (row,) = host.contexts()
        assert row["name"] == name and row["state"] == "active" and row["activations"] == 2
    finally:
        host.shutdown()
        d.remove(name)
        ray.kill(d.actor, no_restart=True)  # the inspector's test expects no directory
