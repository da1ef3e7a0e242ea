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

Tools: ``observe``, ``commit``, ``frame``, ``recall``, ``search``,
``read_event``, ``history``, ``state``, and one tool for each operation the
registry exposes on MCP (:mod:`service.operations`, e.g. ``frame_history``),
made from its declaration: its arguments' schema is the argument model's.
Prompt: ``protocol`` (the full protocol text,
:data:`service.protocol_text.PROTOCOL_TEXT`). Resources:
``morphz://{context}/frames/{id}`` and ``morphz://{context}/events/{ref}``.
See ``docs/mcp.md``. The module is long because the hand-written tools are kept together
with the argument schemas the model reads; the token check is :mod:`servers.mcp_auth`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from protocol.capabilities import PermissionDenied
from protocol.errors import MorphzError, NotFound, RequestError, StoreLocked
from protocol.replies import plain
from servers.mcp_auth import CapabilityVerifier, token_bytes
from servers.operations import operation_tool
from service.operations import operations
from service.protocol_text import PROTOCOL_TEXT

__all__ = [
    "MAX_TEXT_CHARS",
    "Memory",
    "build_server",
    "open_memory",
    "read_capability",
]

MAX_TEXT_CHARS = 1 << 20
"""The longest text argument a tool accepts (an observation, a transaction), in characters."""

MAX_ID_CHARS = 4096
"""The longest frame id, event reference, query or cursor a tool accepts."""

MAX_CAPABILITY_BYTES = 64 << 10
"""The largest capability token accepted."""

STATE_PAGE = 200
"""The most frames (and events) one ``state`` call lists."""

READ_CHUNK = 64 << 10
"""Characters a ``read_event`` call returns when no length is given."""


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

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call *method* on the port (under the lock when embedded); its reply."""
        target = self.target
        if self.per_caller:
            access = get_access_token()
            if access is None:  # the SDK refuses unauthenticated requests before this
                raise PermissionDenied("this server needs 'Authorization: Bearer <token>'")
            target = target.with_capability(token_bytes(access.token))
        fn = getattr(target, method)
        if self._lock is None:
            return fn(*args, **kwargs)
        with self._lock:
            return fn(*args, **kwargs)

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
    from actors.client.lookup import advertised, lookup
    from actors.client.names import DEFAULT_NAMESPACE
    from actors.client.transport import init_ray, ray_module
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


def _receipt(receipt: Any) -> dict[str, Any]:
    """The receipt as the model reads it, with a hint on what to do after a rejection."""
    doc = dict(_plain(receipt))
    if doc.get("status") == "rejected":
        codes = sorted({str(e.get("code")) for e in doc.get("errors") or ()})
        doc["hint"] = (
            "nothing was written. "
            + (
                "Other writers changed the ids in 'conflicts' since your base-version: read"
                " them again (frame, state), then resubmit on the current version."
                if doc.get("conflicts")
                else "Fix the operation named in 'errors' and resubmit."
            )
            + (f" Codes: {', '.join(codes)}." if codes else "")
        )
    return doc


# -- tool argument types (their JSON schemas are what the model reads) --------------------

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Ident = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
Session = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        description="The session (conversation or agent thread) the record belongs to.",
    ),
]
Kind = Literal["user_message", "tool_result", "external", "recall_result"]

COMMIT_DESCRIPTION = """\
Change memory with one context transaction: S-expression text that commits whole \
or not at all. Shape:
(context-tx (base-version N) (reason "why")
  (derive ID (from SOURCE...) BODY)   ; new frame from events @eN / frames
  (revise ID BODY)                    ; new revision of a frame (the whole body)
  (set|append|remove ID (FIELD VALUE...)) (incr ID (FIELD N)) (unset ID FIELD) ; one field
  (relate SUBJECT LABEL OBJECT) (unrelate SUBJECT LABEL OBJECT)
  (retire ID-or-@eN) (restore ID) (protect ID) (unprotect ID))
N is the version you read (from `state` or a receipt). Bodies are S-expressions \
such as (tests passed) or (region "cn-shanghai"). The reply is the receipt: status \
"committed" (new version, what was retired) or "rejected" — then nothing was \
written, and `errors` (code, message, op) and `conflicts` (ids changed by others \
and the versions that changed them) say what to do: re-read and resubmit on the \
current version. Transactions on frames nobody else touched are rebased \
automatically. On a frame others write too, edit fields instead of revising: an \
append never conflicts, a set only with a change to the same field (named in \
`conflicts`). The full language and lifecycle are in the `protocol` prompt. \
client_id makes a retry safe: the same id returns the original receipt."""


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

    @server.tool(
        description=(
            "Record an observation (a user message, tool result or external input) in memory;"
            " it is kept verbatim and gets a reference @eN that transactions cite in (from …)."
            " With claim (default true) the waiting inputs are claimed at once as one batch"
            " (one tick), so a transaction may cite it right away."
        ),
        annotations=recorded,
    )
    def observe(
        text: Annotated[Text, Field(description="The observation's text, verbatim.")],
        kind: Annotated[Kind, Field(description="What the input is.")] = "tool_result",
        session: Session = "main",
        claim: Annotated[
            bool, Field(description="Claim the waiting inputs now (advances the tick).")
        ] = True,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            doc = dict(_plain(memory.call("observe", kind, text, session=session)))
            if claim:
                doc["claim"] = _plain(memory.call("claim"))
            return doc

        return run(go)

    @server.tool(
        description=COMMIT_DESCRIPTION,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    def commit(
        tx: Annotated[
            Text,
            Field(min_length=1, description="The whole (context-tx …) text."),
        ],
        client_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=128,
                description="Idempotency key: resubmitting with it returns the first receipt.",
            ),
        ] = None,
    ) -> CallToolResult:
        return run(lambda: _receipt(memory.call("submit", tx, client_id)))

    @server.tool(
        description=("Read one frame by id: its body, revision, lifecycle, sources and relations."),
        annotations=read_only,
    )
    def frame(id: Annotated[Ident, Field(description="The frame id.")]) -> CallToolResult:
        return run(lambda: memory.call("frame", id))

    @server.tool(
        description=(
            "Walk the memory graph from a frame (sources, relations, the events behind"
            " them; retired ones too). The page is recorded as a recall_result observation"
            " and returned as text; pass next_cursor back as cursor for the next page."
        ),
        annotations=recorded,
    )
    def recall(
        frame_id: Annotated[Ident, Field(description="The frame to start from.")],
        depth: Annotated[int, Field(ge=0, le=4, description="How many hops.")] = 1,
        direction: Literal["ancestors", "descendants", "both"] = "both",
        include_bodies: bool = True,
        include_events: bool = False,
        max_nodes: Annotated[int, Field(ge=1, le=128)] = 32,
        cursor: Annotated[
            str | None, Field(max_length=MAX_ID_CHARS, description="next_cursor of a page.")
        ] = None,
        session: Session = "main",
    ) -> CallToolResult:
        request = {
            "frame_id": frame_id,
            "depth": depth,
            "direction": direction,
            "include_bodies": include_bodies,
            "include_events": include_events,
            "max_nodes": max_nodes,
        }

        def go() -> dict[str, Any]:
            reply = _plain(
                memory.call("recall_observation", request, cursor=cursor, session=session)
            )
            page = _plain(memory.call("read_event", reply["ref"], 0, MAX_TEXT_CHARS))
            return {**reply, "text": page["text"]}

        return run(go)

    @server.tool(
        description=(
            "Search frames and events (retired content too) by keywords, and by meaning"
            " when the server has an embedder (MORPHZ_EMBED_*). The result is recorded as a"
            " recall_result observation and returned as text: each hit's id, kind,"
            " lifecycle, the signals that found it (hybrid) and snippet."
        ),
        annotations=recorded,
    )
    def search(
        query: Annotated[Ident, Field(description="Words to look for.")],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        kinds: Annotated[
            list[Annotated[str, Field(max_length=64)]] | None,
            Field(max_length=8, description="Only these kinds: frame, tool_result, …"),
        ] = None,
        id_prefix: Annotated[str | None, Field(max_length=MAX_ID_CHARS)] = None,
        include_recalls: Annotated[
            bool,
            Field(description="Also search the recorded results of earlier searches/recalls."),
        ] = False,
        session: Session = "main",
    ) -> CallToolResult:
        args: dict[str, Any] = {"query": query, "limit": limit}
        if include_recalls:
            args["include_recalls"] = True
        if kinds is not None:
            args["kinds"] = kinds
        if id_prefix is not None:
            args["id_prefix"] = id_prefix

        def go() -> dict[str, Any]:
            reply = _plain(memory.call("search", args, session))
            page = _plain(memory.call("read_event", reply["ref"], 0, MAX_TEXT_CHARS))
            return {**reply, "text": page["text"]}

        return run(go)

    @server.tool(
        description=(
            "Read a chunk of an observation's original text by reference (@eN), retired"
            f" ones too. Returns text, size and more (default length {READ_CHUNK})."
        ),
        annotations=read_only,
    )
    def read_event(
        ref: Annotated[Ident, Field(description="An event reference such as @e42.")],
        offset: Annotated[int, Field(ge=0)] = 0,
        length: Annotated[int, Field(ge=0, le=MAX_TEXT_CHARS)] = READ_CHUNK,
    ) -> CallToolResult:
        return run(lambda: memory.call("read_event", ref, offset, length))

    @server.tool(
        description="Every committed write of a frame, oldest first: op, revision, body, version.",
        annotations=read_only,
    )
    def history(id: Annotated[Ident, Field(description="The frame id.")]) -> CallToolResult:
        return run(lambda: {"id": id, "writes": memory.call("history", id)})

    @server.tool(
        description=(
            "A summary of the context: version (use it as base-version), tick, window, and"
            f" one page of frames and events (at most {STATE_PAGE} each; pass offset for"
            " the next page) with relation and waiting-input counts."
        ),
        annotations=read_only,
    )
    def state(
        offset: Annotated[int, Field(ge=0, description="Skip this many frames/events.")] = 0,
        limit: Annotated[int, Field(ge=1, le=STATE_PAGE)] = 50,
    ) -> CallToolResult:
        def go() -> dict[str, Any]:
            s = _plain(memory.call("state"))
            frames, events = s["frames"], s["events"]
            end = offset + limit
            return {
                "context": s["context"],
                "version": s["version"],
                "tick": s["tick"],
                "window": s["window"],
                "frames": frames[offset:end],
                "events": events[offset:end],
                "counts": {
                    "frames": len(frames),
                    "events": len(events),
                    "relations": len(s["relations"]),
                    "waiting": len(s["waiting"]),
                },
                "next_offset": end if end < max(len(frames), len(events)) else None,
            }

        return run(go)

    for op in operations():
        if op.mcp is not None:
            server.add_tool(
                operation_tool(op, memory.call, run, CallToolResult),
                name=op.mcp.name or op.name,
                description=op.mcp.description or op.doc,
                annotations=recorded if op.writes else read_only,
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
