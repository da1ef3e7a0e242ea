"""The HTTP routes made from the operation registry (:mod:`service.operations`).

(The MCP tools are :mod:`service.model_tools`'.) An operation declared with
``http=Route(...)`` becomes an HTTP route (:func:`add_routes`) whose OpenAPI
entry carries the argument model as the request (path, query or JSON body),
the reply type as the 200 answer and the ``{"error": …}`` map of every
refusal. Neither checks an argument: the call goes to the port's method of the
same name, which checks them once (:meth:`service.registry.Operation.bind`).
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

from protocol.errors import RequestError
from protocol.replies import plain
from service.operations import operations
from service.registry import Operation, Port

__all__ = [
    "ERROR_STATUSES",
    "ErrorDetail",
    "ErrorReply",
    "add_routes",
    "openapi_extra",
    "reply_model",
    "route_endpoint",
]


class ErrorDetail(BaseModel):
    """What went wrong: a stable code, a message, and fields some errors add (a parse
    error's line and column, a rejected transaction's receipt)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ErrorReply(BaseModel):
    """The one shape of every refusal of the HTTP API: ``{"error": {"code", "message", …}}``."""

    error: ErrorDetail


ERROR_STATUSES = {
    401: "no capability for a guarded call",
    403: "the capability does not allow the call",
    404: "unknown context, frame or event",
    409: "a conflict with the state of the server",
    422: "malformed or out-of-range arguments",
    503: "the context actor cannot be reached",
}
"""The refusals every route made from the registry may answer, each with :class:`ErrorReply`."""


CONTEXT_PARAMETER = {
    "name": "context",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The context's name.",
}


SCALARS = (int, float, str, bool)
"""Reply types an HTTP reply wraps in an object, as it wraps a list."""


def _key(op: Operation[Any, Any]) -> str | None:
    """The key an HTTP reply of *op* answers its value under: a list under the route's key
    (default ``items``), a number or a string under it (default ``result``, as an MCP tool
    answers it); None for a reply that is an object already."""
    assert op.http is not None
    if typing.get_origin(op.reply) is list:
        return op.http.key or "items"
    if op.reply in SCALARS:
        return op.http.key or "result"
    return None


def reply_model(op: Operation[Any, Any]) -> Any:
    """The type an HTTP reply of *op* has: its reply, a list or a scalar under its key."""
    key = _key(op)
    if key is not None:
        fields: dict[str, Any] = {key: (op.reply, ...)}
        name = op.args.__name__.removesuffix("Args") + "Page"
        page: type[BaseModel] = create_model(name, **fields)
        return page
    return op.reply


def _parameter(op: Operation[Any, Any], name: str, where: str) -> dict[str, Any]:
    field = op.args.model_fields[name]
    # A union with its constraints inside (a version or a tag) has no metadata of its own.
    annotated: Any = (
        Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    )
    schema = TypeAdapter(annotated).json_schema()
    out: dict[str, Any] = {"name": name, "in": where, "required": field.is_required()}
    out["schema"] = schema if field.is_required() else {**schema, "default": field.default}
    if field.description:
        out["description"] = field.description
    return out


def openapi_extra(op: Operation[Any, Any]) -> dict[str, Any]:
    """The OpenAPI entry's request part: path and query parameters (GET) or the JSON body
    (POST), each from the argument model."""
    assert op.http is not None
    in_path = op.path_names()
    rest = [name for name in op.names if name not in in_path]
    params = [CONTEXT_PARAMETER, *(_parameter(op, name, "path") for name in in_path)]
    extra: dict[str, Any] = {}
    if op.http.method == "GET":
        params += [_parameter(op, name, "query") for name in rest]
    elif rest:
        schema = op.args.model_json_schema()
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k in rest}
        schema["required"] = [k for k in schema.get("required", ()) if k in rest]
        extra["requestBody"] = {
            "required": bool(schema["required"]),
            "content": {"application/json": {"schema": schema}},
        }
    extra["parameters"] = params
    return extra


def route_endpoint(
    op: Operation[Any, Any],
    port: Callable[[Request, str], Awaitable[Port]],
    body: Callable[[Request], Awaitable[Any]],
) -> Callable[[Request], Awaitable[Any]]:
    """The endpoint of *op*'s route: its arguments from the path, the query string (GET)
    or the JSON body (POST), checked once by the argument model; the call through
    ``await port(request, context)``; the reply as JSON (a list under the route's key)."""
    assert op.http is not None
    route = op.http
    key = _key(op)

    async def endpoint(request: Request) -> Any:
        values: dict[str, Any] = dict(request.path_params)
        context = values.pop("context")
        strings = route.method == "GET"
        if strings:
            values.update(request.query_params)
        elif set(op.names) - set(values):
            doc = await body(request) if await request.body() else {}
            if not isinstance(doc, dict):
                raise RequestError(f"the body of {op.name} is a JSON object", code="bad_argument")
            values.update(doc)
        args = op.check(values, strings=strings)
        target = await port(request, context)
        data = plain(await target.invoke_async(op, args))
        if key is not None:
            data = {key: data}
        return JSONResponse(data, status_code=route.status)

    endpoint.__name__ = op.name
    return endpoint


def add_routes(
    app: FastAPI,
    base: str,
    port: Callable[[Request, str], Awaitable[Port]],
    body: Callable[[Request], Awaitable[Any]],
) -> None:
    """Add the route of every operation the registry exposes over HTTP to *app*, under
    *base* (``/v1/contexts/{context}``), calling the port ``await port(request, context)``
    answers; *body* reads a request's JSON body (with the app's size limit)."""
    for op in operations():
        if op.http is None:
            continue
        app.add_api_route(
            base + op.http.path,
            route_endpoint(op, port, body),
            methods=[op.http.method],
            name=op.name,
            summary=op.doc,
            status_code=op.http.status,
            response_model=None,
            responses={
                op.http.status: {"model": reply_model(op), "description": "the reply"},
                **{s: {"model": ErrorReply, "description": d} for s, d in ERROR_STATUSES.items()},
            },
            openapi_extra=openapi_extra(op),
        )
