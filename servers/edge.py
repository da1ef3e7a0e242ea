"""What the HTTP edge checks before a request reaches a route: host, origin, body size, token.

:class:`EdgeMiddleware` is a plain ASGI middleware in front of the HTTP API
(:func:`servers.http_api.create_app`). For every request, in this order, and
before one byte of the body is read:

1. **Host** (DNS rebinding). The ``Host`` header's name must be in the
   allow-list (:attr:`EdgePolicy.hosts`: the loopback names by default, plus
   the address ``serve`` binds and each ``--allow-host``); otherwise ``421
   bad_host``. A page served from ``evil.example`` whose name was re-pointed at
   127.0.0.1 sends ``Host: evil.example`` and reads nothing.
2. **Origin** (cross-site requests). A request carrying ``Origin`` must come
   from ``http(s)://<allowed host>[:port]``, and one a browser marks
   ``Sec-Fetch-Site: cross-site`` is refused; otherwise ``403 cross_origin``.
3. **Simple writes** (CSRF). A browser sends a cross-site ``POST`` without a
   preflight when its content type is ``text/plain``, a form or none; such a
   write is accepted only with the ``X-Morphz-Request`` header (any value; a
   browser cannot add it cross-site without a preflight, which this server
   never grants) or from an allowed ``Origin`` (``/docs``' "Try it out");
   otherwise ``403 cross_site_write``. JSON bodies need nothing more.
4. **Size.** A ``Content-Length`` over :attr:`EdgePolicy.max_body_bytes` is
   ``413 too_large`` at once; a chunked body is counted as it streams and
   refused the moment it passes the cap (never buffered whole first).
5. **Token** (when the server enforces capabilities). ``Authorization:
   Bearer <token>`` is verified — signature, expiry, revocation, tenant — and
   must grant the route's operation on the context named in the path (below the
   app's mount point, :func:`route_path`), by :attr:`EdgePolicy.authorize`,
   before the body is read or parsed: ``401`` without a token, ``403`` with a
   bad one. The context actor still checks every call itself (and audits the
   refusals that reach it).

Every refusal has the API's one error shape, ``{"error": {"code", "message"}}``,
and is audited by :attr:`EdgePolicy.audit` (:mod:`servers.edge_audit`: an entry
each up to a rate per client and code, then counted; handed over in batches, never
on the request's path). The body, once read within the cap, is handed to the app
unchanged.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from protocol.capabilities import PermissionDenied
from protocol.errors import MorphzError
from servers.edge_audit import EdgeAudit

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_TOKEN_CHARS",
    "REQUEST_HEADER",
    "EdgeMiddleware",
    "EdgePolicy",
    "bearer",
    "bearer_token",
    "host_name",
    "route_path",
]

MAX_TOKEN_CHARS = 8192
"""The longest ``Authorization`` token accepted."""

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""The host names every server accepts in ``Host`` and ``Origin``."""

REQUEST_HEADER = "x-morphz-request"
"""The header that marks a non-browser (or same-origin) write sent with a simple content type."""

SIMPLE_TYPES = frozenset(
    {"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}
)
"""Content types a browser sends cross-site without asking first (CORS-safelisted)."""

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

Authorize = Callable[[bytes | None, str | None, str, str], Awaitable[None]]
"""``await authorize(token, context, method, path)``: PermissionDenied when the token may not."""


def host_name(value: str) -> str:
    """The host name of a ``Host`` header or an authority (``name[:port]``, ``[v6][:port]``),
    lowercased, without brackets or port; ``""`` when it is not one."""
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (text[end + 1 :] and not text[end + 1 :].startswith(":")):
            return ""
        return text[1:end]
    if text.count(":") > 1:  # a bare IPv6 address (not valid in Host, but unambiguous)
        return text
    name = text.partition(":")[0]
    return name.rstrip(".")


def _allowed_hosts(names: Iterable[str]) -> frozenset[str]:
    out = set(LOOPBACK_HOSTS)
    for name in names:
        host = host_name(name) if name.startswith("[") else name.strip().lower().strip("[]")
        if host in ("", "0.0.0.0", "::"):  # a wildcard bind names no host
            continue
        out.add(host)
    return frozenset(out)


@dataclass(frozen=True)
class EdgePolicy:
    """What :class:`EdgeMiddleware` lets through (see the module docstring).

    *hosts*: the extra names accepted in ``Host``/``Origin`` besides
    :data:`LOOPBACK_HOSTS`; *max_body_bytes*: the largest body; *authorize*:
    the token check of an enforcing server (None: no check at the edge).
    """

    hosts: Iterable[str] = ()
    max_body_bytes: int = 1 << 20
    authorize: Authorize | None = None
    audit: EdgeAudit = field(default_factory=EdgeAudit)
    """Where every refusal is accounted for (rate-limited, batched: :mod:`servers.edge_audit`)."""
    allowed: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed", _allowed_hosts(self.hosts))

    def host_allowed(self, host: str) -> bool:
        """Whether *host* (a ``Host`` header value) names this server."""
        name = host_name(host)
        if name in self.allowed:
            return True
        try:  # any address of 127.0.0.0/8
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def origin_allowed(self, origin: str) -> bool:
        """Whether *origin* (an ``Origin`` header value) is a page of this server."""
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            return False
        return self.host_allowed(parts.netloc)


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class EdgeMiddleware:
    """The ASGI middleware applying an :class:`EdgePolicy` (see the module docstring)."""

    def __init__(self, app: Any, policy: EdgePolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for k, v in scope.get("headers") or ():
            headers.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
        try:
            self._check_headers(scope, headers)
            token = bearer_token(headers.get("authorization"))
            if self.policy.authorize is not None:
                path = route_path(scope) or "/"
                await self.policy.authorize(token, _context_of(path), scope["method"], path)
            body = await self._read_body(receive, headers)
        except _Refused as e:
            self.policy.audit.refused(e.status, e.code, scope, headers.get("host", ""))
            await _answer(send, e.status, e.code, e.message)
            return
        except PermissionDenied as e:
            status = 403 if headers.get("authorization") is not None else 401
            self.policy.audit.refused(status, e.code, scope, headers.get("host", ""))
            await _answer(send, status, e.code, e.message)
            return
        except MorphzError as e:
            await _answer(send, 422, e.code, e.message)
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_headers(self, scope: Any, headers: dict[str, str]) -> None:
        host = headers.get("host", "")
        if not self.policy.host_allowed(host):
            raise _Refused(421, "bad_host", f"this server does not answer for host {host[:80]!r}")
        origin = headers.get("origin")
        if origin is not None and not self.policy.origin_allowed(origin):
            raise _Refused(403, "cross_origin", f"requests from {origin[:80]!r} are refused")
        if headers.get("sec-fetch-site") == "cross-site":
            raise _Refused(403, "cross_origin", "cross-site requests are refused")
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if (
            scope["method"] in WRITE_METHODS
            and media in SIMPLE_TYPES
            and REQUEST_HEADER not in headers
            and origin is None
        ):
            raise _Refused(
                403,
                "cross_site_write",
                f"a {media or 'body-less'} write needs the {REQUEST_HEADER} header"
                " (or send application/json)",
            )

    async def _read_body(self, receive: Any, headers: dict[str, str]) -> list[Any]:
        """The request's body messages, refused past the cap before the rest is read."""
        cap = self.policy.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > cap):
            raise _Refused(413, "too_large", f"the request body is over {cap} bytes")
        messages: list[Any] = []
        total = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            total += len(message.get("body", b""))
            if total > cap:
                raise _Refused(413, "too_large", f"the request body is over {cap} bytes")
            if not message.get("more_body", False):
                return messages


def bearer_token(header: str | None) -> bytes | None:
    """The capability bytes of ``Authorization: Bearer <base64url>`` (None without the
    header); a malformed header is :class:`PermissionDenied`."""
    if header is None:
        return None
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value or len(value) > MAX_TOKEN_CHARS:
        raise PermissionDenied("Authorization must be 'Bearer <capability token>'")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as e:
        raise PermissionDenied("the bearer token is not URL-safe base64") from e


def bearer(token: bytes) -> str:
    """The ``Authorization`` header value carrying capability *token*."""
    return "Bearer " + base64.urlsafe_b64encode(token).decode("ascii").rstrip("=")


def route_path(scope: Any) -> str:
    """The request's path below the app's mount point (``root_path``: Serve's route prefix),
    as the app's routes see it (Starlette's rule)."""
    path: str = scope.get("path") or ""
    root = scope.get("root_path") or ""
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :]
    return path


def _context_of(path: str) -> str | None:
    """The context named by ``/v1/contexts/{context}/…`` (None on other paths)."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[1] == "v1" and parts[2] == "contexts" and parts[3]:
        return unquote(parts[3])
    return None


def _replay(messages: list[Any], receive: Any) -> Any:
    queue = list(messages)

    async def again() -> Any:
        if queue:
            return queue.pop(0)
        return await receive()

    return again


async def _answer(send: Any, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
