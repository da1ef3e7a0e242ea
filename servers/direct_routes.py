"""The HTTP API's hot routes answered without FastAPI's routing: :class:`DirectRoutes`.

A commit over HTTP spends about as much of the replica's CPU in FastAPI's and Starlette's
machinery (the exception and exit-stack middlewares, matching every route's pattern,
solving the endpoint's dependencies, encoding its reply) as in the endpoint itself. For a
route whose endpoint reads its own request (no dependency, nothing for FastAPI to
validate) and answers a :class:`~starlette.responses.Response`, that machinery adds
nothing: :class:`DirectRoutes` calls the endpoint at once.

The endpoint is the same function FastAPI registers (so its OpenAPI entry and any
request that does not match exactly, a trailing slash or another method, stay
FastAPI's); a typed error it raises gets the answer the app's handler gives it; any
other exception goes up to Starlette's error middleware (500), as from the router. It
sits inside :class:`servers.edge.EdgeMiddleware`: every edge check runs first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from protocol.errors import MorphzError
from servers.edge import route_path

__all__ = ["DirectRoutes", "Endpoint", "OnError"]

Endpoint = Callable[..., Awaitable[Response]]
"""``await endpoint(**path_params, request=request)``: its response."""
OnError = Callable[[Request, MorphzError], Awaitable[Response]]
"""The app's handler of typed errors (the same for every route)."""


def _pattern(path: str) -> tuple[str, ...]:
    parts = tuple(path.split("/"))
    if any(p.startswith("{") != p.endswith("}") or "{" in p[1:-1] for p in parts):
        raise ValueError(f"a direct route's segment is a literal or a whole {{name}}: {path}")
    return parts


def _match(pattern: tuple[str, ...], parts: list[str]) -> dict[str, str] | None:
    if len(parts) != len(pattern):
        return None
    params: dict[str, str] = {}
    for want, got in zip(pattern, parts, strict=True):
        if want.startswith("{"):
            if not got:  # as Starlette's [^/]+
                return None
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params


class DirectRoutes:
    """ASGI middleware: ``routes`` maps ``(method, path template)`` to its endpoint (see the
    module docstring); a template's segments are literals or whole ``{name}`` parameters."""

    def __init__(
        self, app: Any, routes: Mapping[tuple[str, str], Endpoint], on_error: OnError
    ) -> None:
        self.app = app
        self.on_error = on_error
        self.routes = [(method, _pattern(path), fn) for (method, path), fn in routes.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            parts = route_path(scope).split("/")
            for method, pattern, endpoint in self.routes:
                if scope["method"] != method:
                    continue
                params = _match(pattern, parts)
                if params is not None:
                    await self._answer(endpoint, params, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _answer(
        self, endpoint: Endpoint, params: dict[str, str], scope: Any, receive: Any, send: Any
    ) -> None:
        request = Request(scope, receive, send)
        try:
            response = await endpoint(**params, request=request)
        except MorphzError as e:
            response = await self.on_error(request, e)
        await response(scope, receive, send)
