"""The MCP server: one context's memory as Model Context Protocol tools, a prompt and resources.

Built on the official ``mcp`` SDK (:class:`mcp.server.mcpserver.MCPServer`).
:func:`build_server` answers a server over a :class:`Memory`, which reaches
the context through one of two ports with the same method names and reply
models (``docs/api.md``):

* the embedded :class:`~service.context.Context`, when this process may hold
  the store (calls are serialized by a lock: MCP runs tool calls in threads);
* a context actor's :class:`~actors.client.handle.ContextHandle`, when an actor holds
  the store or a Ray address is given — so several server processes (one per
  MCP client, as stdio hosts spawn them) share one memory and every write is
  conflict-checked by the actor: rebased or rejected, never lost.

:func:`open_memory` picks the port. The server re-implements no rule: it
checks arguments (types, bounds), calls the service or the actor, and
translates errors. A rejected transaction is a tool *result* carrying the
receipt (status, code, message, conflicting ids and versions), which the
model can act on; an argument that is wrong or refused is a tool error result
``{"error": {"code", "message"}}``, with nothing written.

Tools: every tool of :func:`service.model_tools.model_tools`, as declared there
(``observe``, ``commit``, ``frame``, ``recall``, ``search``, ``read_event``,
``history``, ``state``, and one for each operation the registry exposes on MCP,
e.g. ``frame_history``): none is written here.
Prompt: ``protocol`` (the full protocol text,
:data:`service.protocol_text.PROTOCOL_TEXT`). Resources:
``morphz://{context}/frames/{id}`` and ``morphz://{context}/events/{ref}``.
See ``docs/mcp.md``. The token check is :mod:`servers.mcp_auth`.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from protocol.capabilities import PermissionDenied
from protocol.errors import MorphzError, NotFound, RequestError, StoreLocked
from protocol.replies import plain
from servers.mcp_auth import CapabilityVerifier, token_bytes
from service.model_tools import MAX_TEXT_CHARS, READ_CHUNK, ModelTool, model_tools
from service.protocol_text import PROTOCOL_TEXT

__all__ = [
    "MAX_TEXT_CHARS",
    "Memory",
    "build_server",
    "open_memory",
    "read_capability",
]

T = TypeVar("T")

MAX_CAPABILITY_BYTES = 64 << 10
"""The largest capability token accepted."""


class Memory:
    """One context's memory through one port: the embedded context or a context actor's handle.

    Both ports answer the same calls with the same reply models, so every tool
    calls :meth:`call` with the method name and arguments they share. ``via``
    is ``"store"`` or ``"actor"``. Embedded calls are serialized by a lock
    (the SDK runs each tool call in a worker thread). ``enforce`` and ``tenant`` are the
    actor's (an embedded store enforces nothing).

    With ``per_caller`` (``--http`` over an enforcing actor) every call carries the bearer
    token of the MCP client that made it (verified by :class:`CapabilityVerifier`), never
    a token of the server's own.
    """

    def __init__(
        self,
        target: Any,
        *,
        via: Literal["store", "actor"],
        context: str,
        close: Callable[[], None] | None = None,
        enforce: bool = False,
        tenant: str | None = None,
    ) -> None:
        self.target = target
        self.via = via
        self.context = context
        self.enforce = enforce
        self.tenant = tenant
        self.per_caller = False
        self._close = close
        self._lock = threading.Lock() if via == "store" else None

    def run(self, fn: Callable[[Any], T]) -> T:
        """*fn(port)* on the port (under the lock when embedded, with the caller's token
        when ``per_caller``); its answer."""
        target = self.target
        if self.per_caller:
            access = get_access_token()
            if access is None:  # the SDK refuses unauthenticated requests before this
                raise PermissionDenied("this server needs 'Authorization: Bearer <token>'")
            target = target.with_capability(token_bytes(access.token))
        if self._lock is None:
            return fn(target)
        with self._lock:
            return fn(target)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call *method* on the port (see :meth:`run`); its reply."""
        return self.run(lambda port: getattr(port, method)(*args, **kwargs))

    def close(self) -> None:
        """Close the embedded context, or leave Ray if this process joined it."""
        if self._close is not None:
            self._close()
            self._close = None


def read_capability(value: str | None) -> bytes | None:
    """The capability token named by ``--capability`` / ``MORPHZ_CAPABILITY``.

    *value* is a path to a file holding the token bytes (as ``morphz review
    --capability`` takes), or the token itself in base64 (standard or URL-safe).
    None stays None. Anything else is :class:`RequestError` ``bad_argument``.
    """
    if value is None or value == "":
        return None
    if os.path.isfile(value):
        try:
            with open(value, "rb") as f:
                data = f.read(MAX_CAPABILITY_BYTES + 1)
        except OSError as e:
            raise RequestError(f"cannot read the capability file: {e}", code="bad_argument") from e
    else:
        text = value.strip()
        try:
            data = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            try:
                data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
            except (binascii.Error, ValueError) as e:
                raise RequestError(
                    "--capability is a file holding the token or the token in base64",
                    code="bad_argument",
                ) from e
    if not 0 < len(data) <= MAX_CAPABILITY_BYTES:
        raise RequestError("the capability token is empty or too large", code="bad_argument")
    return data


def open_memory(
    store: str,
    context: str,
    *,
    address: str | None = None,
    capability: bytes | None = None,
    create: bool = False,
) -> Memory:
    """The :class:`Memory` of *context* in *store*: through its context actor, or embedded.

    With a Ray address (*address*, else ``RAY_ADDRESS``) the server always
    goes through the context actor there: the running one, or one it starts
    (detached, so it outlives this server and serves every other one). With
    no address, the store is opened here (embedded) unless a context actor
    holds it, found through the advert it writes into the store
    (:func:`actors.client.lookup.advertised`), as ``morphz tx`` finds it.
    *capability* travels with every actor call; embedded there is no guard,
    so a capability without an actor is refused (``bad_argument``).
    """
    target = address or os.environ.get("RAY_ADDRESS") or None
    if target is not None:
        return _actor_memory(store, context, target, capability, create, may_start=True)
    if capability is not None:
        from actors.client.lookup import advertised

        # A token is enforced only by an actor: never serve the store embedded with one.
        if advertised(store, context) is None:
            raise RequestError(
                "a capability is enforced by a context actor, and no actor holds this store:"
                " pass --address (or set RAY_ADDRESS) to serve it through one",
                code="bad_argument",
            )
        return _actor_memory(store, context, None, capability, create, may_start=False)
    from service.search import embedder_from_env
    from service.store import Store

    embedder = embedder_from_env()  # MORPHZ_EMBED_*: hybrid search
    try:
        ctx = Store(store).open(context, create=create)
    except StoreLocked as locked:
        return _actor_memory(store, context, None, None, create, may_start=False, locked=locked)
    if embedder is not None:
        ctx.use_embedder(embedder)
    return Memory(ctx, via="store", context=context, close=ctx.close)


def _actor_memory(
    store: str,
    context: str,
    address: str | None,
    capability: bytes | None,
    create: bool,
    *,
    may_start: bool,
    locked: StoreLocked | None = None,
) -> Memory:
    """The memory through the context actor of *store*/*context* (Ray imported only here).

    *may_start*: start the actor (detached) when the cluster has none; only when
    the cluster was named, never on the strength of a possibly stale advert.
    """
    from actors.client.joining import init_ray, ray_module
    from actors.client.lookup import advertised, lookup
    from actors.client.names import DEFAULT_NAMESPACE
    from actors.server.connect import connect

    advert = advertised(store, context)
    target = address or (advert or {}).get("address")
    if not target:
        why = locked.message if locked is not None else "the store is held by another process"
        raise StoreLocked(
            f"{why}; no context actor advertises itself in the store: "
            "pass --address (or set RAY_ADDRESS) to serve through the actor that holds it"
        ) from locked
    namespace = str((advert or {}).get("namespace") or DEFAULT_NAMESPACE)
    joined = init_ray(str(target))

    def leave() -> None:
        if joined:
            ray_module().shutdown()

    try:
        try:
            handle = lookup(context, namespace, store_dir=store, capability=capability)
        except NotFound:
            if not may_start:
                raise
            from service.search import embedder_from_env

            handle = connect(
                context,
                store_dir=store,
                namespace=namespace,
                create=create,
                lifetime="detached",
                capability=capability,
                embedder=embedder_from_env(),  # MORPHZ_EMBED_*: the actor's search is hybrid
            )
        info = handle.handshake()
    except BaseException:
        leave()
        raise
    return Memory(
        handle,
        via="actor",
        context=context,
        close=leave,
        enforce=bool(info["enforce"]),
        tenant=str(info["tenant"]),
    )


# -- results ------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """*value* as plain JSON data: a receipt by its JSON form, a reply model as a dict."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
    return plain(value)


def _result(doc: Any, *, error: bool = False) -> CallToolResult:
    """A tool result: the JSON document as text and as structured content."""
    data = _plain(doc)
    if not isinstance(data, dict):
        data = {"result": data}
    text = json.dumps(data, ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=data, is_error=error
    )


def _error(e: MorphzError) -> CallToolResult:
    """A tool error result: ``{"error": {"code", "message"}}`` (nothing was written)."""
    return _result({"error": {"code": e.code, "message": e.message}}, error=True)


def served(
    tool: ModelTool, memory: Memory, run: Callable[[Callable[[], Any]], CallToolResult]
) -> Callable[..., CallToolResult]:
    """The MCP tool function of *tool*: keyword parameters are its arguments (so the SDK's
    input schema is the tool's, and the SDK checks a call against it first); its body runs
    the tool on *memory*'s port through *run* (a refusal is an error result)."""

    def fn(**arguments: Any) -> CallToolResult:
        return run(lambda: memory.run(lambda port: tool.call(port, arguments)))

    fn.__name__ = tool.name
    fn.__doc__ = tool.description
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        list(tool.parameters), return_annotation=CallToolResult
    )
    fn.__annotations__ = {p.name: p.annotation for p in tool.parameters}
    fn.__annotations__["return"] = CallToolResult
    return fn


def build_server(
    memory: Memory,
    *,
    name: str = "morphz",
    verifier: CapabilityVerifier | None = None,
    url: str | None = None,
) -> MCPServer:
    """An MCP server whose tools, prompt and resources read and change *memory*'s context.

    With *verifier* (``--http`` over an enforcing actor) the server is an OAuth resource
    server at *url*: a request without a valid bearer token is 401 (with the protected
    resource metadata the MCP authorization spec names), and each call carries the
    caller's token to the actor (``memory.per_caller``)."""
    auth = None
    if verifier is not None:
        if url is None:
            raise RequestError("a verifying server needs its URL", code="bad_argument")
        # Tokens come from `morphz grant issue`, not an OAuth flow: the server names itself
        # as the issuer and checks the audience (the context) in the verifier.
        auth = AuthSettings(issuer_url=url, resource_server_url=url, validate_token_resource=False)  # type: ignore[arg-type]
        memory.per_caller = True
    server: MCPServer = MCPServer(
        name=name,
        token_verifier=verifier,
        auth=auth,
        log_level="WARNING",
        instructions=(
            f"Morphz memory of context {memory.context!r}: durable observations and frames"
            " changed only by conflict-checked transactions. Read `state` first; record"
            " inputs with `observe`; change memory with `commit` (see the `protocol` prompt)."
        ),
    )

    @contextmanager
    def translated() -> Iterator[None]:
        try:
            yield
        except ValidationError as e:  # a request model the service builds from the arguments
            raise RequestError(
                f"bad arguments: {e.error_count()} error(s): {e.errors()[0]['msg']}",
                code="bad_argument",
            ) from e

    def run(fn: Callable[[], Any]) -> CallToolResult:
        try:
            with translated():
                doc = fn()
        except MorphzError as e:
            return _error(e)
        return _result(doc)

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    recorded = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    # A commit may change anything, and the same client id answers the first receipt.
    changes = ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    )
    for tool in model_tools():
        server.add_tool(
            served(tool, memory, run),
            name=tool.name,
            description=tool.description,
            annotations=(changes if tool.name == "commit" else recorded)
            if tool.writes
            else read_only,
        )

    @server.prompt(
        name="protocol",
        description="The Morphz protocol: input layout, the transaction language, the lifecycle.",
    )
    def protocol() -> str:
        return PROTOCOL_TEXT

    def resource_read(fn: Callable[[], Any]) -> str:
        try:
            with translated():
                doc = fn()
        except MorphzError as e:
            raise ResourceError(f"{e.code}: {e.message}") from e
        return json.dumps(_plain(doc), ensure_ascii=False)

    def same_context(context: str) -> None:
        if context != memory.context:
            raise ResourceError(
                f"not_found: this server serves context {memory.context!r}, not {context!r:.80}"
            )

    @server.resource(
        "morphz://{context}/frames/{+id}",
        name="frame",
        description="A frame of the context, as the frame tool returns it (JSON).",
        mime_type="application/json",
    )
    def frame_resource(context: str, id: str) -> str:
        same_context(context)
        return resource_read(lambda: memory.call("frame", id))

    @server.resource(
        "morphz://{context}/events/{ref}",
        name="event",
        description="An observation's metadata and its first chunk of text (JSON).",
        mime_type="application/json",
    )
    def event_resource(context: str, ref: str) -> str:
        same_context(context)
        return resource_read(lambda: memory.call("read_event", ref, 0, READ_CHUNK))

    return server
