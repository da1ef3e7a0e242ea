"""The HTTP API: a FastAPI app over context actors, served as a Ray Serve application.

Every route calls a context actor through its :class:`~actors.client.handle.ContextHandle`
(one per context, cached in the replica) and translates the reply: no rule is
written here. :func:`create_app` builds the app over a :class:`Resolver` (what
gives the handle of a context name), so tests and other hosts can serve it as
they like; :func:`serve_app` wraps it in a Ray Serve deployment (the app is
built on each replica, with an :class:`ActorResolver`).

Routes, under ``/v1`` (docs/http.md has the table):

* ``GET /contexts``, ``POST /contexts`` (``{"name", "window"?}``);
* ``/contexts/{context}/``: ``observations`` (POST), ``claim`` (POST),
  ``transactions`` (POST: S-expression text as ``text/plain`` or
  ``{"text": …}``, or the JSON form of :func:`protocol.txwire.tx_from_dict`;
  the ``Idempotency-Key`` header is the client id, so a retried POST answers
  the original receipt, ``duplicate: true``, and commits nothing again),
  ``frames/{id}`` (``?version=`` for an as-of read) and ``frames/{id}/history``,
  ``events/{ref}`` (``?offset=&length=`` for a chunk of its text), ``recall``
  (POST), ``search`` (GET ``?query=&limit=`` or POST the arguments), ``state``,
  ``audit``, ``review`` (GET the pending items, POST ``review/{frame}``).

The web inspector (:mod:`servers.inspector`) is mounted at ``/inspect``: read-only
pages and their JSON twins, every read through the same handles and guard.

Status codes: 200 (201 for a created context or a new observation), 409 with
the receipt for a rejected transaction (and for ``exists`` / ``store_locked``),
404 unknown context, frame, event or route, 422 malformed input, 401 a guarded
call with no capability (``Authorization: Bearer <token>``, the token's bytes
in URL-safe base64) and 403 one the context actor refused, 503 an unreachable
actor. Every error has one shape, the CLI's: ``{"error": {"code", "message",
…}}``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from actors.client.batching import SubmitBatcher
from protocol import capabilities
from protocol.capabilities import PermissionDenied
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    ParseError,
    RequestError,
    StoreError,
    StoreLocked,
    TransportError,
    WireError,
)
from protocol.receipts import Receipt
from protocol.txwire import submitted_from_dict
from protocol.wire import json_document
from servers.direct_routes import DirectRoutes
from servers.edge import EdgeMiddleware, EdgePolicy, bearer, bearer_token
from servers.edge_audit import ChainedSink, EdgeAudit
from servers.inspector import HandleSource, create_inspector
from servers.operations import add_routes
from servers.resolver import ActorResolver, Resolver, permission_of, sees
from servers.tx_openapi import MAX_BODY_BYTES, TX_OPENAPI, TX_RESPONSES

if TYPE_CHECKING:
    from actors.client.handle import ContextHandle

__all__ = [
    "MAX_BODY_BYTES",
    "ActorResolver",
    "Resolver",
    "bearer",
    "create_app",
    "error_status",
    "serve_app",
]


API_PREFIX = "/v1"
INLINE_PARSE_CHARS = 8192
"""A transaction text longer than this is parsed on a worker thread, off the event loop."""
MAX_ONGOING_REQUESTS = 256
"""Requests one replica serves at once (Ray Serve's ``max_ongoing_requests``)."""
REPLICA_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}
"""Serve's settings in each replica's process: the app runs on the loop that serves HTTP, so a
request crosses no thread (it keeps blocking work off that loop; see docs/http.md)."""
MAX_BATCHERS = 4096
"""Most (context, token) submit batchers a replica keeps; the least recently used goes."""
INSPECTOR_PREFIX = "/inspect"
"""Where the web inspector is mounted (servers/inspector)."""


# -- errors ----------------------------------------------------------------------


CONFLICT_CODES = frozenset(
    {"exists", "store_locked", "scope_mismatch", "context_elsewhere", "not_reviewable"}
)
"""Refusals that are a conflict with the state of the server (409), not bad input."""


def error_status(e: MorphzError, *, had_token: bool) -> int:
    """The HTTP status of a typed error: the one table every route uses."""
    if isinstance(e, PermissionDenied):
        return 403 if had_token else 401
    if e.code == "too_large":
        return 413
    if e.code == "overloaded":
        return 429
    if e.code.startswith("bad_"):  # malformed input (bad_ref …), as the CLI's exit 2
        return 422
    if isinstance(e, NotFound):
        return 404
    if isinstance(e, (ParseError, WireError, OutOfRange)):
        return 422
    if isinstance(e, TransportError):
        return 503
    if isinstance(e, StoreLocked) or e.code in CONFLICT_CODES:
        return 409
    if isinstance(e, RequestError):
        return 422
    if isinstance(e, StoreError):
        return 503
    return 500


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status)


def _typed_error(e: MorphzError, had_token: bool) -> JSONResponse:
    extra = {k: v for k, v in e.to_dict().items() if k not in ("error", "message")}
    return _error(error_status(e, had_token=had_token), e.code, e.message, **extra)


def _rejected(receipt: Receipt) -> JSONResponse:
    """409 with the receipt: the first operation error's code, else ``conflict``."""
    if receipt.errors:
        code, message = receipt.errors[0].code, receipt.errors[0].message
    else:
        code, message = "conflict", "the transaction was rejected"
    return _error(409, code, message, receipt=receipt.to_dict())


# -- request bodies -------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NewContext(_Body):
    """``POST /v1/contexts``."""

    name: str = Field(min_length=1, max_length=128)
    window: int | None = None


class Observation(_Body):
    """``POST …/observations``: one observation (``event_id`` makes a retry idempotent)."""

    kind: str = Field(min_length=1, max_length=64)
    text: str
    session: str = "main"
    event_id: str | None = None


# -- the app ----------------------------------------------------------------------------


def _token(request: Request) -> bytes | None:
    """The capability of ``Authorization: Bearer <base64url>``; malformed is PermissionDenied."""
    return bearer_token(request.headers.get("authorization"))


async def _body(request: Request) -> bytes:
    data = await request.body()
    if len(data) > MAX_BODY_BYTES:
        raise WireError(f"the request body is over {MAX_BODY_BYTES} bytes")
    return data


async def _json(request: Request) -> Any:
    data = await _body(request)
    if not data:
        raise WireError("the request body must be a JSON document")
    return json_document(data)  # the wire's rules: no NaN, no duplicate key


def _plain(reply: Any) -> Any:
    """A reply (typed model, receipt, list of them) as JSON-ready data."""
    if isinstance(reply, list):
        return [_plain(r) for r in reply]
    for name in ("as_dict", "to_dict"):
        method = getattr(reply, name, None)
        if callable(method):
            return method()
    return reply


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not raw.lstrip("-").isdigit() or len(raw) > 19:
        raise RequestError(f"{name} must be an integer, not {raw[:40]!r}", code="bad_argument")
    return int(raw)


Route = Callable[..., Awaitable[Any]]


class WireJsonRoute(APIRoute):
    """A route whose JSON body FastAPI reads is read under the wire's rules first
    (:func:`protocol.wire.json_document`): a duplicate key, ``NaN`` or bad UTF-8 is a
    ``wire_error`` (422) on the routes with a body model too, as on ``_json``'s routes."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            data = await _body(request)
            if data:
                # Starlette's Request.json() answers what it finds here: FastAPI reads ours.
                request._json = json_document(data)
            return await handler(request)

        return strict


def create_app(
    resolver: Resolver,
    *,
    hosts: tuple[str, ...] = (),
    batch: bool = True,
    edge_log: str | os.PathLike[str] | None = None,
) -> FastAPI:
    """The FastAPI app of the HTTP API over *resolver* (see the module docstring), behind
    :class:`servers.edge.EdgeMiddleware`: *hosts* are the names it answers for besides
    loopback; when *resolver* enforces capabilities, each request's token is verified and
    must grant the route's operation before its body is read. With *batch* (the default)
    transactions for one context arriving together go to its actor in one ``submit_many``
    (:class:`~actors.client.batching.SubmitBatcher`); without, one ``submit`` each. With
    *edge_log* (a store root) the edge's refusals are also chained into the audit log of
    ``<edge_log>/.edge-audit`` (:class:`servers.edge_audit.ChainedSink`)."""
    app = FastAPI(
        title="Morphz",
        version="1",
        summary="Structured, transactional memory for long-running agents.",
        description="Every write is a conflict-checked context transaction; see docs/http.md.",
    )

    app.router.route_class = WireJsonRoute

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(422, "bad_request", f"{where}: {first.get('msg', 'invalid input')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else f"http_{exc.status_code}"
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(MorphzError)
    async def _morphz(request: Request, exc: MorphzError) -> JSONResponse:
        return _typed_error(exc, request.headers.get("authorization") is not None)

    handles: dict[str, ContextHandle] = {}

    async def handle_of(name: str) -> ContextHandle:
        handle = handles.get(name)
        if handle is None:  # finding the actor blocks (a Ray lookup): off the event loop
            handle = handles[name] = await asyncio.to_thread(resolver.handle, name)
        return handle

    batchers: OrderedDict[tuple[str, bytes | None], SubmitBatcher] = OrderedDict()

    def batcher_of(name: str, handle: ContextHandle) -> SubmitBatcher:
        """The batcher of *name* for the handle's token: transactions arriving together
        for one context with one token go to the actor in one ``submit_many``."""
        key = (name, handle.capability)
        batcher = batchers.get(key)
        if batcher is None:
            batcher = batchers[key] = SubmitBatcher(handle.transport)
            if len(batchers) > MAX_BATCHERS:  # the oldest goes; a send in flight finishes
                batchers.popitem(last=False)
        else:
            batchers.move_to_end(key)
        return batcher

    async def ctx(request: Request, name: str) -> ContextHandle:
        token = _token(request)
        return (await handle_of(name)).with_capability(token)

    async def names(token: bytes | None) -> list[dict[str, Any]]:
        """The contexts *token* may see: all of them unless the server enforces capabilities,
        then those it grants something on (none without a valid token)."""
        found = await asyncio.to_thread(resolver.contexts)
        if not resolver.enforced:
            return found
        try:
            cap = await asyncio.to_thread(resolver.verify, token or b"")
        except PermissionDenied:
            return []
        return [c for c in found if sees(cap, resolver.tenant, c["name"])]

    # The web inspector's pages (docs/inspector.md), each read checked by the actor's guard.
    source = HandleSource(handle_of, names, getattr(resolver, "namespace", None))
    inspector = create_inspector(source, error_status=error_status)
    app.mount(INSPECTOR_PREFIX, inspector)

    base = API_PREFIX + "/contexts/{context}"
    add_routes(app, base, ctx, _json)  # every operation the registry exposes over HTTP

    @app.get(API_PREFIX + "/contexts", summary="The contexts of the store (those the token sees)")
    async def list_contexts(request: Request) -> Any:
        if resolver.enforced:  # a missing or bad token is refused, not an empty list
            await asyncio.to_thread(resolver.verify, _token(request) or b"")
        return {"contexts": await names(_token(request))}

    @app.post(API_PREFIX + "/contexts", status_code=201, summary="Create a context")
    async def create_context(body: NewContext, request: Request) -> Any:
        token = _token(request)
        handles[body.name] = await asyncio.to_thread(resolver.create, body.name, body.window, token)
        return {"context": body.name, "created": True, "enforced": resolver.enforced}

    @app.post(base + "/observations", status_code=201, summary="Record an observation")
    async def observe(context: str, body: Observation, request: Request) -> Any:
        handle = await ctx(request, context)
        reply = await handle.observe.aio(
            body.kind, body.text, session=body.session, event_id=body.event_id
        )
        return _plain(reply)

    @app.post(base + "/claim", summary="Claim the waiting inputs as one tick")
    async def claim(context: str, request: Request) -> Any:
        handle = await ctx(request, context)
        return _plain(await handle.claim.aio())

    @app.post(
        base + "/transactions",
        name="submit",
        summary="Commit a context transaction",
        description='S-expression text (text/plain, or JSON {"text": …}) or the JSON form.'
        " Idempotency-Key is the client id: a retry answers the original receipt."
        " A rejected transaction is 409 with its receipt.",
        response_model=None,
        responses=TX_RESPONSES,
        openapi_extra=TX_OPENAPI,
    )
    async def transactions(context: str, request: Request) -> JSONResponse:
        key = request.headers.get("idempotency-key")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        tx: Any
        if media == "application/json":
            doc = await _json(request)
            if isinstance(doc, dict) and set(doc) == {"text"}:
                tx = doc["text"]
                if not isinstance(tx, str):
                    raise WireError("text must be a string")
            else:
                tx = submitted_from_dict(doc).tx
        elif media in ("text/plain", ""):
            raw = await _body(request)
            try:
                tx = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ParseError(f"the transaction is not valid UTF-8 (byte {e.start})") from e
        else:
            raise WireError(f"send text/plain or application/json, not {media[:60]!r}")
        handle = await ctx(request, context)
        if isinstance(tx, str) and len(tx) > INLINE_PARSE_CHARS:  # parsing is CPU: off the loop
            payload = await asyncio.to_thread(handle.payload, tx, key)
        else:
            payload = handle.payload(tx, key)
        if batch:
            receipt = await batcher_of(context, handle).submit(payload)
        else:
            receipt = await handle.submit_payload_async(payload)
        if not receipt.committed:
            return _rejected(receipt)
        return JSONResponse(receipt.to_dict())

    @app.get(base + "/frames/{frame_id}", summary="A frame (?version= for an as-of read)")
    async def frame(context: str, frame_id: str, request: Request) -> Any:
        version = _int_param(request, "version")
        handle = await ctx(request, context)
        if version is None:
            return _plain(await handle.frame.aio(frame_id))
        return _plain(await handle.frame_at.aio(frame_id, version))

    @app.get(base + "/frames/{frame_id}/history", summary="Every committed write of a frame")
    async def history(context: str, frame_id: str, request: Request) -> Any:
        handle = await ctx(request, context)
        return {"history": _plain(await handle.history.aio(frame_id))}

    @app.get(base + "/events/{ref}", summary="An event (?offset=&length= for a chunk of its text)")
    async def event(context: str, ref: str, request: Request) -> Any:
        offset, length = _int_param(request, "offset"), _int_param(request, "length")
        handle = await ctx(request, context)
        if offset is None and length is None:
            return _plain(await handle.event.aio(ref))
        return _plain(await handle.read_event.aio(ref, offset or 0, length))

    @app.post(
        base + "/recall",
        name="recall_observation",
        summary="Recall a page into a recall_result observation",
    )
    async def recall(context: str, request: Request) -> Any:
        doc = await _json(request)
        if not isinstance(doc, dict):
            raise RequestError("a recall request is a JSON object", code="bad_argument")
        session, cursor = doc.pop("session", "main"), doc.pop("cursor", None)
        handle = await ctx(request, context)
        reply = await handle.recall_observation.aio(doc, session=session, cursor=cursor)
        return _plain(reply)

    async def _search(context: str, request: Request, args: Any) -> Any:
        if not isinstance(args, dict):
            raise RequestError("search arguments are a JSON object", code="bad_argument")
        session = args.pop("session", "main")
        handle = await ctx(request, context)
        return _plain(await handle.search.aio(args, session))

    @app.get(base + "/search", name="search", summary="Search (?query=&limit=)")
    async def search_get(context: str, request: Request) -> Any:
        args: dict[str, Any] = {k: v for k, v in request.query_params.items() if k != "limit"}
        limit = _int_param(request, "limit")
        if limit is not None:
            args["limit"] = limit
        if "include_recalls" in args:  # ?include_recalls=true
            flag = str(args["include_recalls"]).lower()
            if flag not in ("true", "false"):
                raise RequestError("include_recalls is true or false", code="bad_argument")
            args["include_recalls"] = flag == "true"
        return await _search(context, request, args)

    @app.post(
        base + "/search", name="search", summary="Search (the search tool's arguments as JSON)"
    )
    async def search_post(context: str, request: Request) -> Any:
        return await _search(context, request, await _json(request))

    async def authorize(token: bytes | None, context: str | None, method: str, path: str) -> None:
        if not resolver.enforced or not path.startswith(API_PREFIX + "/"):
            return
        if token is None:
            raise PermissionDenied(
                "this server enforces capabilities: send 'Authorization: Bearer <token>'"
            )
        cap = await asyncio.to_thread(resolver.verify, token)
        if context is None:
            return
        op = permission_of(app, method, path)
        granted = (
            sees(cap, resolver.tenant, context)
            if op is None
            else capabilities.allows(cap, resolver.tenant or "", context, op)
        )
        if not granted:
            raise PermissionDenied(
                f"{cap.holder!r} holds no {op or 'grant'} on context {context!r:.80}"
            )

    # the commit route is answered before FastAPI's routing (servers/direct_routes.py), after
    # every edge check: added first, it sits inside the edge
    app.add_middleware(
        DirectRoutes, routes={("POST", base + "/transactions"): transactions}, on_error=_morphz
    )
    app.add_middleware(
        EdgeMiddleware,
        policy=EdgePolicy(
            hosts=hosts,
            max_body_bytes=MAX_BODY_BYTES,
            authorize=authorize,
            audit=EdgeAudit() if edge_log is None else EdgeAudit(ChainedSink(edge_log)),
        ),
    )
    return app


# -- the Ray Serve application -------------------------------------------------------


class _Ingress:
    """The Serve deployment class: builds the app on its replica over an ActorResolver."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings

    def __serve_build_asgi_app__(self) -> FastAPI:
        settings = dict(self.settings)
        hosts = tuple(settings.pop("hosts", ()))
        batch = bool(settings.pop("batch", True))
        return create_app(
            ActorResolver(**settings), hosts=hosts, batch=batch, edge_log=settings["store_dir"]
        )


def serve_app(
    store_dir: str | os.PathLike[str],
    *,
    namespace: str,
    node_id: str | None = None,
    enforce: bool = False,
    tenant: str | None = None,
    project: str | None = None,
    replicas: int = 1,
    hosts: tuple[str, ...] = (),
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    batch: bool = True,
    access_log: bool = False,
) -> Any:
    """The bound Ray Serve application of the HTTP API (pass it to ``serve.run``).

    Each of *replicas* replicas builds :func:`create_app` over an
    :class:`ActorResolver` of *store_dir* (made absolute here) and *namespace*,
    serving up to *max_ongoing_requests* requests at once, batching submissions
    unless *batch* is false. Serve's line per request in the replica's log is written only
    with *access_log* (refusals are audited at the edge and by the context actors, commits
    are in the store: docs/http.md).
    """
    # Ray is imported lazily, by name: the layering test lists ray as lazy for servers but
    # not among its third-party roots, so a plain `from ray import serve` here fails it.
    serve: Any = importlib.import_module("ray.serve")

    settings = {
        "store_dir": os.path.abspath(os.fspath(store_dir)),
        "namespace": namespace,
        "node_id": node_id,
        "enforce": enforce,
        "tenant": tenant,
        "project": project,
        "hosts": list(hosts),
        "batch": batch,
    }
    deployment: Any = serve.deployment(
        serve.ingress()(_Ingress),
        name="morphz-http",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": REPLICA_ENV}},
        max_ongoing_requests=max_ongoing_requests,
        logging_config={"enable_access_log": access_log},
    )
    return deployment.bind(settings)
