"""The commit route answered before FastAPI's routing (servers/direct_routes.py) answers as
FastAPI's route would, after every edge check, and leaves everything else to FastAPI.

A real client (httpx over ASGI) against a FastAPI app served twice: with the direct route
and without it; the answers are compared byte for byte. The product's own app
(:func:`servers.http_api.create_app`) is driven with refused requests, which are decided
before any context actor is called (committed requests go through Ray in test_http.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from protocol.errors import MorphzError, ParseError
from servers.direct_routes import DirectRoutes
from servers.edge import REQUEST_HEADER, Authorize, EdgeMiddleware, EdgePolicy
from servers.http_api import ActorResolver, create_app

PATH = "/v1/contexts/{context}/transactions"


def _app(direct: bool, seen: list[tuple[str, bool]], authorize: Authorize | None = None) -> FastAPI:
    """A FastAPI app with the commit route's shape behind the edge (with *authorize* as its
    token check); *seen* gets (context, routed by FastAPI) of each call of the endpoint."""
    app = FastAPI()

    async def transactions(context: str, request: Request) -> JSONResponse:
        seen.append((context, "route" in request.scope))
        body = await request.body()
        if body == b"bad":
            raise ParseError("unbalanced parenthesis", line=1, column=4)
        if body == b"boom":
            raise RuntimeError("not a typed error")
        return JSONResponse({"context": context, "text": body.decode(), "é": [1.5, None]})

    @app.exception_handler(MorphzError)
    async def typed(request: Request, exc: MorphzError) -> JSONResponse:
        return JSONResponse({"error": exc.to_dict()}, 422)

    app.post(PATH, response_model=None)(transactions)
    if direct:
        app.add_middleware(DirectRoutes, routes={("POST", PATH): transactions}, on_error=typed)
    app.add_middleware(EdgeMiddleware, policy=EdgePolicy(max_body_bytes=64, authorize=authorize))
    return app


async def _send(app: FastAPI, requests: list[tuple[str, str, bytes, dict[str, str]]]) -> list[Any]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, root_path="")
    out: list[Any] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for method, path, body, headers in requests:
            r = await client.request(method, path, content=body, headers=headers)
            out.append((r.status_code, r.headers.get("content-type"), r.content))
    return out


def test_the_direct_route_answers_as_fastapi_and_leaves_the_rest_to_it() -> None:
    marked = {"content-type": "text/plain", REQUEST_HEADER: "1"}
    requests = [
        ("POST", "/v1/contexts/c%20one/transactions", b"(tx)", marked),  # the route
        ("POST", "/v1/contexts/c1/transactions", b"bad", marked),  # a typed error
        ("POST", "/v1/contexts/c1/transactions", b"boom", marked),  # any other: 500
        ("POST", "/v1/contexts/c1/transactions/", b"(tx)", marked),  # FastAPI's redirect
        ("GET", "/v1/contexts/c1/transactions", b"", {}),  # 405
        ("POST", "/v1/contexts//transactions", b"(tx)", marked),  # no context: 404
        ("POST", "/v1/contexts/c1/transactions/x", b"(tx)", marked),  # 404
        ("POST", "/v1/contexts/c1/transactions", b"(tx)", {"content-type": "text/plain"}),
        ("POST", "/v1/contexts/c1/transactions", b"x" * 65, marked),  # over the edge's cap
    ]
    direct_seen: list[tuple[str, bool]] = []
    routed_seen: list[tuple[str, bool]] = []
    direct = asyncio.run(_send(_app(True, direct_seen), requests))
    routed = asyncio.run(_send(_app(False, routed_seen), requests))
    assert direct == routed  # status, content type and body, byte for byte
    statuses = [status for status, _, _ in direct]
    assert statuses == [200, 422, 500, 307, 405, 404, 404, 403, 413]
    assert direct[0][2] == b'{"context":"c one","text":"(tx)","\xc3\xa9":[1.5,null]}'
    assert b'"line":1' in direct[1][2] and b'"error":"parse_error"' in direct[1][2]
    # the same three requests reached the endpoint, on the direct path without FastAPI's
    # router; the cross-site write and the oversized body reached neither
    assert direct_seen == [("c one", False), ("c1", False), ("c1", False)]
    assert routed_seen == [("c one", True), ("c1", True), ("c1", True)]


def test_under_a_mount_point_the_route_and_the_edges_token_check_see_the_apps_path() -> None:
    checked: list[tuple[str | None, str]] = []

    async def authorize(token: bytes | None, context: str | None, method: str, path: str) -> None:
        checked.append((context, path))

    seen: list[tuple[str, bool]] = []
    app = _app(True, seen, authorize)

    async def post() -> httpx.Response:
        # Serve's route prefix reaches the app as root_path, and inside path (ASGI)
        transport = httpx.ASGITransport(app=app, root_path="/pre")
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.post(
                "/pre/v1/contexts/c1/transactions",
                content=b"(tx)",
                headers={"content-type": "application/json"},
            )

    r = asyncio.run(post())
    assert r.status_code == 200, r.text
    assert checked == [("c1", "/v1/contexts/c1/transactions")]
    assert seen == [("c1", False)]


def test_the_apps_commit_route_refuses_as_before_without_calling_an_actor(tmp_path: Path) -> None:
    app = create_app(ActorResolver(str(tmp_path), "direct-routes"))
    url = "/v1/contexts/c1/transactions"
    marked = {REQUEST_HEADER: "1"}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return [
                await c.post(url, content=b"<tx/>", headers={"content-type": "text/xml"}),
                await c.post(url, content=b"{", headers={"content-type": "application/json"}),
                await c.post(url, json={"text": 5}, headers={"content-type": "application/json"}),
                await c.post(
                    url, content=b"\xff(", headers={**marked, "content-type": "text/plain"}
                ),
                await c.post(url, content=b"(tx)", headers={"content-type": "text/plain"}),
                await c.post(
                    url,
                    content=b"x" * (2 << 20),
                    headers={**marked, "content-type": "text/plain"},
                ),
                await c.get(url),
            ]

    answers = asyncio.run(run())
    got = [(r.status_code, r.json()["error"]["code"]) for r in answers]
    assert got == [
        (422, "wire_error"),
        (422, "wire_error"),
        (422, "wire_error"),
        (422, "parse_error"),
        (403, "cross_site_write"),
        (413, "too_large"),
        (405, "http_405"),
    ]
    assert "byte 0" in answers[3].json()["error"]["message"]
    # the route and its OpenAPI entry are FastAPI's as before
    entry = app.openapi()["paths"][url.replace("c1", "{context}")]["post"]
    assert entry["operationId"].startswith("submit")
    assert set(entry["requestBody"]["content"]) == {"text/plain", "application/json"}
    assert entry["parameters"][-1]["name"] == "Idempotency-Key"
