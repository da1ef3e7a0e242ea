"""The inspector's pages: each one HTML page and its JSON twin, from one data function.

``/`` lists the contexts; under ``/c/{context}/`` are ``graph``, ``frame``,
``history``, ``diff``, ``event``, ``transactions``, ``traces``, ``search`` and
``governance``. The same path under ``/api`` answers the page's data as JSON (the
data the page is rendered from, read through the same :class:`~.source.Source`).
Only GET requests read anything; the one POST stores a capability token in a cookie.
Every page is rendered by Jinja2 with autoescaping on and served with a
Content-Security-Policy that allows scripts from this server only, so a frame body
holding HTML or JavaScript is shown as text and never run. Nothing is loaded from
another host: the graph library is vendored under ``static/``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.exceptions import HTTPException as StarletteHTTPException

from protocol.capabilities import PermissionDenied
from protocol.errors import MorphzError, RequestError
from servers.inspector.source import Source

__all__ = ["COOKIE", "CSP", "create_inspector"]

HERE = Path(__file__).parent
COOKIE = "morphz_capability"
"""The cookie a browser keeps its capability token in (``/capability`` sets it)."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
"""Scripts and requests only to this server; cytoscape sets inline styles on its canvas."""
MAX_PARAM_CHARS = 1000
PAGE = 50


class Status(Protocol):
    """The HTTP status of a typed error (:func:`servers.http_api.error_status`)."""

    def __call__(self, e: MorphzError, *, had_token: bool) -> int: ...


Data = Callable[..., Awaitable[dict[str, Any]]]


def _when(t: Any) -> str:
    if not isinstance(t, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _marks(snippet: Any) -> Markup:
    """A search snippet with its ``«match»`` markers as ``<mark>``, everything else escaped."""
    text = str(escape(str(snippet)))
    return Markup(text.replace("«", "<mark>").replace("»", "</mark>"))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["when"] = _when
    env.filters["marks"] = _marks
    return env


def _token_of(request: Request) -> bytes | None:
    """The caller's capability: ``Authorization: Bearer …``, else the cookie."""
    header = request.headers.get("authorization")
    raw: str | None
    if header is not None:
        scheme, _, raw = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise PermissionDenied("Authorization must be 'Bearer <capability token>'")
    else:
        raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    raw = raw.strip()
    if len(raw) > 8192:
        raise PermissionDenied("the capability token is too long")
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError) as e:
        raise PermissionDenied("the capability token is not URL-safe base64") from e


def _text(request: Request, name: str, default: str | None = None) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if len(raw) > MAX_PARAM_CHARS:
        raise RequestError(f"{name} is over {MAX_PARAM_CHARS} characters", code="bad_argument")
    return raw


def _int(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.lstrip("-").isdigit() or len(raw) > 19:
        raise RequestError(f"{name} must be an integer, not {raw[:40]!r}", code="bad_argument")
    return int(raw)


def _need(value: Any, name: str) -> Any:
    if value is None:
        raise RequestError(f"the page needs ?{name}=", code="bad_argument")
    return value


@dataclass
class _Pages:
    source: Source

    async def read(self, request: Request, context: str, what: str, **args: Any) -> Any:
        args = {k: v for k, v in args.items() if v is not None}
        return await self.source.read(context, what, args, _token_of(request))

    async def contexts(self, request: Request) -> dict[str, Any]:
        rows = await self.source.contexts(_token_of(request))
        placement = await self.source.placement()
        return {"contexts": rows, "served": self.source.served, "placement": placement}

    async def graph(self, request: Request, context: str) -> dict[str, Any]:
        data = await self.read(
            request,
            context,
            "graph",
            center=_text(request, "center"),
            version=_int(request, "version"),
            radius=_int(request, "radius"),
            limit=_int(request, "limit"),
        )
        return dict(data)

    async def frame(self, request: Request, context: str) -> dict[str, Any]:
        fid = _need(_text(request, "id"), "id")
        version = _int(request, "version")
        if version is None:
            frame = await self.read(request, context, "frame", frame=fid)
        else:
            frame = await self.read(request, context, "frame_at", frame=fid, version=version)
        sources = []
        for ref in list(frame.get("sources") or ())[:20]:
            item: dict[str, Any] = {"ref": ref}
            if str(ref).startswith("@e"):
                page = await self.read(request, context, "read_event", ref=ref, length=2000)
                meta = await self.read(request, context, "event", ref=ref)
                item.update(kind=meta.get("kind"), text=page["text"], more=page["more"])
                item.update(session=meta.get("session"), lifecycle=meta.get("lifecycle"))
            else:
                item["frame"] = True
            sources.append(item)
        return {"frame": frame, "sources": sources, "as_of": version}

    async def history(self, request: Request, context: str) -> dict[str, Any]:
        fid = _need(_text(request, "id"), "id")
        data = await self.read(
            request, context, "revisions", frame=fid, before=_int(request, "before"), limit=PAGE
        )
        return dict(data)

    async def diff(self, request: Request, context: str) -> dict[str, Any]:
        fid = _need(_text(request, "id"), "id")
        a, b = _need(_int(request, "a"), "a"), _need(_int(request, "b"), "b")
        data = await self.read(request, context, "diff", frame=fid, a=a, b=b)
        revs = await self.read(request, context, "revisions", frame=fid, limit=PAGE)
        return {**data, "revisions": revs["revisions"]}

    async def event(self, request: Request, context: str) -> dict[str, Any]:
        ref = _need(_text(request, "ref"), "ref")
        offset = _int(request, "offset", 0) or 0
        meta = await self.read(request, context, "event", ref=ref)
        page = await self.read(
            request, context, "read_event", ref=ref, offset=offset, length=20_000
        )
        return {"event": meta, "page": page}

    async def transactions(self, request: Request, context: str) -> dict[str, Any]:
        data = await self.read(
            request,
            context,
            "transactions",
            after=_int(request, "after"),
            before=_int(request, "before"),
            limit=_int(request, "limit", PAGE),
        )
        return {**data, "served": self.source.served}

    async def metrics(self, request: Request, context: str) -> dict[str, Any]:
        return {"metrics": await self.read(request, context, "metrics")}

    async def traces(self, request: Request, context: str) -> dict[str, Any]:
        after = _int(request, "after", 0) or 0
        rows = await self.read(request, context, "traces", after=after, limit=PAGE)
        return {"traces": rows, "after": after, "next": rows[-1]["call"] if rows else None}

    async def search(self, request: Request, context: str) -> dict[str, Any]:
        query = _text(request, "q")
        if query is None:
            return {"query": "", "hits": []}
        limit = _int(request, "limit", 20)
        return dict(await self.read(request, context, "search", query=query, limit=limit))

    async def rejections(self, request: Request, context: str) -> dict[str, Any]:
        before = _int(request, "before")
        data = await self.read(request, context, "rejections", before=before, limit=PAGE)
        return {**data, "before": before}

    async def governance(self, request: Request, context: str) -> dict[str, Any]:
        after = _int(request, "after", 0) or 0
        pending = await self.read(request, context, "pending")
        audit = await self.read(request, context, "audit", after=after, limit=PAGE)
        # Verifying reads the whole log: only when asked (?verify=1).
        verify = _text(request, "verify") not in (None, "0")
        chain = await self.read(request, context, "chain") if verify else None
        items = pending.get("items") or []
        return {
            "version": pending.get("version"),
            "pending": [i for i in items if i.get("verdict") != "quarantine"],
            "quarantine": [i for i in items if i.get("verdict") == "quarantine"],
            "audit": audit,
            "after": after,
            "chain": chain,
        }


PAGES = (
    "graph",
    "frame",
    "history",
    "diff",
    "event",
    "transactions",
    "rejections",
    "metrics",
    "traces",
    "search",
    "governance",
)
"""The per-context pages; each is ``/c/{context}/<page>`` and ``/api/c/{context}/<page>``."""


def create_inspector(source: Source, *, error_status: Status) -> FastAPI:
    """The inspector app over *source* (mount it, e.g. at ``/inspect``).

    *error_status* maps a typed error to its HTTP status (the HTTP API's table,
    :func:`servers.http_api.error_status`), so a page fails as the API would.
    """
    app = FastAPI(title="Morphz inspector", docs_url=None, redoc_url=None, openapi_url=None)
    env = _environment()
    pages = _Pages(source)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def html(request: Request, template: str, code: int = 200, **data: Any) -> HTMLResponse:
        page = env.get_template(template).render(base=base(request), served=source.served, **data)
        return HTMLResponse(page, code, headers={"Content-Security-Policy": CSP})

    def failure(request: Request, status: int, code: str, message: str) -> Response:
        if request.url.path.startswith(base(request) + "/api/"):
            return JSONResponse({"error": {"code": code, "message": message}}, status)
        return html(request, "error.html", status, status=status, error=code, message=message)

    @app.exception_handler(MorphzError)
    async def _typed(request: Request, exc: MorphzError) -> Response:
        had_token = "authorization" in request.headers or COOKIE in request.cookies
        return failure(request, error_status(exc, had_token=had_token), exc.code, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = "not_found" if exc.status_code == 404 else f"http_{exc.status_code}"
        return failure(request, exc.status_code, code, str(exc.detail))

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        return response

    @app.get("/api/", include_in_schema=False)
    async def contexts_json(request: Request) -> Any:
        return await pages.contexts(request)

    @app.get("/", include_in_schema=False)
    async def contexts_page(request: Request) -> Any:
        found = await pages.contexts(request)
        return html(
            request, "contexts.html", contexts=found["contexts"], placement=found["placement"]
        )

    @app.post("/capability", include_in_schema=False)
    async def capability(request: Request) -> Any:
        form = (await request.body()).decode("utf-8", "replace")
        token = ""
        for part in form.split("&"):
            key, _, value = part.partition("=")
            if key == "token":
                from urllib.parse import unquote_plus

                token = unquote_plus(value).strip()
        response = RedirectResponse(base(request) + "/", 303)
        if token:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        else:
            response.delete_cookie(COOKIE)
        return response

    @app.get("/c/{context}/", include_in_schema=False)
    async def context_home(request: Request, context: str) -> Any:
        return RedirectResponse(f"{base(request)}/c/{_quote(context)}/graph", 307)

    for name in PAGES:
        _route(app, pages, name, html)
    return app


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _route(app: FastAPI, pages: _Pages, name: str, html: Callable[..., HTMLResponse]) -> None:
    data: Data = getattr(pages, name)

    async def as_json(request: Request, context: str) -> Any:
        return await data(request, context)

    async def as_page(request: Request, context: str) -> Any:
        found = await data(request, context)
        return html(request, f"{name}.html", context=context, page=name, data=found)

    app.get(f"/api/c/{{context}}/{name}", include_in_schema=False)(as_json)
    if name != "metrics":
        app.get(f"/c/{{context}}/{name}", include_in_schema=False)(as_page)
