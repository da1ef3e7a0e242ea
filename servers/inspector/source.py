"""Where the inspector's pages read from: an embedded store, or context actors.

A :class:`Source` answers :meth:`Source.read` — one named read of one context with
its arguments — and lists the contexts. :class:`StoreSource` opens each context of a
store directory read-only in this process (``morphz inspect``); :class:`HandleSource`
asks the context actors through their handles, carrying the caller's capability,
so the actor's guard checks each read exactly as it checks the HTTP API's
(``morphz serve``). Neither writes: the inspector's search is the read-only one of
:func:`service.inspection.inspect_search`, never a model's search (which records an
observation).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from protocol.errors import NotFound, RequestError
from protocol.replies import Reply
from service import inspection, inspection_audit

if TYPE_CHECKING:
    from actors.client.handle import ContextHandle
    from service.context import Context

__all__ = ["READS", "HandleSource", "Source", "StoreSource"]

READS = (
    "audit",
    "chain",
    "diff",
    "event",
    "frame",
    "frame_at",
    "graph",
    "history",
    "meta",
    "metrics",
    "pending",
    "read_event",
    "rejections",
    "revisions",
    "search",
    "traces",
    "transactions",
)
"""The reads a source answers."""


class Source(Protocol):
    """What the inspector reads through."""

    served: bool
    """True under ``morphz serve`` (contexts behind actors; metrics exist)."""

    async def contexts(self, token: bytes | None) -> list[dict[str, Any]]:
        """The contexts, each ``{"name", …counters}``."""
        ...

    async def read(self, context: str, what: str, args: dict[str, Any], token: bytes | None) -> Any:
        """The read *what* (one of :data:`READS`) of *context* as JSON-ready data."""
        ...

    async def placement(self) -> list[dict[str, Any]] | None:
        """On a cluster, each placed context's primary, followers and lag; else None."""
        ...


def _plain(reply: Any) -> Any:
    """A typed reply (or a list of them) as the plain dict its JSON twin shows."""
    if isinstance(reply, list):
        return [r.as_dict() if isinstance(r, Reply) else r for r in reply]
    return reply.as_dict() if isinstance(reply, Reply) else reply


def _embedded(ctx: Context, what: str, a: dict[str, Any]) -> Any:
    if what in inspection.INSPECT_VIEWS:
        return inspection.inspect(ctx, what, a)
    if what in inspection_audit.AUDIT_VIEWS:
        return inspection_audit.audit_view(ctx, what, a)
    if what == "search":
        return ctx.inspect_search(a["query"], a.get("limit", 20))
    if what == "meta":
        return ctx.meta()
    if what == "frame":
        return ctx.frame(a["frame"])
    if what == "frame_at":
        return ctx.frame_at(a["frame"], a["version"])
    if what == "history":
        return ctx.history(a["frame"])
    if what == "event":
        return ctx.event(a["ref"])
    if what == "read_event":
        return ctx.read_event(a["ref"], a.get("offset", 0), a.get("length"))
    if what == "traces":
        return ctx.traces(after=a.get("after", 0), limit=a.get("limit", 50))
    if what == "pending":
        return _plain(ctx.pending())
    if what == "audit":
        return ctx.audit(a.get("after", 0), a.get("limit", 100))
    if what == "metrics":
        return None  # an embedded store has no actor counting commits and rejections
    raise RequestError(f"no read {what[:40]!r}", code="bad_argument")


class StoreSource:
    """Every context of one store directory, opened read-only in this process.

    Opened contexts are kept (a read-only open takes no writer lock, so a running
    writer is unaffected) and read one at a time: a context is not thread-safe. A
    context's counters (``Store.info``, which counts every frame) are kept until its
    version moves.
    """

    served = False

    def __init__(self, store_dir: str) -> None:
        from service.store import Store

        self.store = Store(store_dir)
        self._open: dict[str, Context] = {}
        self._info: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _context(self, name: str) -> Context:
        ctx = self._open.get(name)
        if ctx is None:
            from service.search import embedder_from_env
            from service.store import open_context

            # MORPHZ_EMBED_*: hybrid search, as `morphz serve` and `morphz search` do.
            embedder = embedder_from_env()
            ctx = open_context(self.store.path, name, readonly=True, embedder=embedder)
            self._open[name] = ctx
        return ctx

    def _contexts(self) -> list[dict[str, Any]]:
        with self._lock:
            if not self.store.path.is_dir():
                self.store.contexts_info()  # NotFound: no store there (never an empty list)
            out = []
            for name in self.store.contexts():
                version = self._context(name).meta().version
                cached = self._info.get(name)
                if cached is None or cached["version"] != version:  # counting frames is O(n)
                    cached = self._info[name] = self.store.info(name).model_dump()
                out.append(cached)
            return out

    def _read(self, context: str, what: str, args: dict[str, Any]) -> Any:
        with self._lock:
            return _plain(_embedded(self._context(context), what, args))

    async def contexts(self, token: bytes | None) -> list[dict[str, Any]]:
        """See :class:`Source`."""
        return await asyncio.to_thread(self._contexts)

    async def placement(self) -> list[dict[str, Any]] | None:
        """See :class:`Source`: an embedded store has no cluster."""
        return None

    async def read(self, context: str, what: str, args: dict[str, Any], token: bytes | None) -> Any:
        """See :class:`Source`; *token* is not needed by an embedded store."""
        return await asyncio.to_thread(self._read, context, what, args)

    def close(self) -> None:
        """Close every context opened."""
        with self._lock:
            for ctx in self._open.values():
                ctx.close()
            self._open.clear()


Handles = Callable[[str], Awaitable["ContextHandle"]]


class HandleSource:
    """Contexts behind their actors: *handle* gives a context's handle (NotFound for an
    unknown one), *names* lists the contexts a token may see (``await names(token)``);
    with *namespace* (the actors'), the contexts page shows the cluster's placement
    (primary, followers, lag). Every read carries the caller's token."""

    served = True

    def __init__(
        self,
        handle: Handles,
        names: Callable[[bytes | None], Awaitable[list[dict[str, Any]]]],
        namespace: str | None = None,
    ) -> None:
        self._handle = handle
        self._names = names
        self._namespace = namespace

    async def placement(self) -> list[dict[str, Any]] | None:
        """See :class:`Source`: the placement table of the context directory of the
        actors' namespace (docs/cluster.md); empty when no directory was created."""
        if self._namespace is None:
            return None
        return await asyncio.to_thread(_placement, self._namespace)

    async def contexts(self, token: bytes | None) -> list[dict[str, Any]]:
        """See :class:`Source`: each context the token may see (*names*) with its counters
        where its actor answers."""
        out = []
        for row in await self._names(token):
            item = dict(row)
            try:
                h = (await self._handle(item["name"])).with_capability(token)
                meta = await h.meta.aio()
                item.update(version=meta.version, tick=meta.tick, window=meta.window)
            except NotFound:
                continue
            except Exception as e:  # one unreachable or refusing actor: shown, not fatal
                item["error"] = getattr(e, "code", type(e).__name__)
            out.append(item)
        return out

    async def read(self, context: str, what: str, args: dict[str, Any], token: bytes | None) -> Any:
        """See :class:`Source`."""
        h = (await self._handle(context)).with_capability(token)
        a = args
        if what in inspection.INSPECT_VIEWS:
            return await h.inspect.aio(what, a)
        if what in inspection_audit.AUDIT_VIEWS:
            return await h.inspect_audit.aio(what, a)
        if what == "search":
            return await h.inspect_search.aio(a["query"], a.get("limit", 20))
        if what == "meta":
            return _plain(await h.meta.aio())
        if what == "frame":
            return _plain(await h.frame.aio(a["frame"]))
        if what == "frame_at":
            return _plain(await h.frame_at.aio(a["frame"], a["version"]))
        if what == "history":
            return _plain(await h.history.aio(a["frame"]))
        if what == "event":
            return _plain(await h.event.aio(a["ref"]))
        if what == "read_event":
            return _plain(await h.read_event.aio(a["ref"], a.get("offset", 0), a.get("length")))
        if what == "traces":
            return await h.traces.aio(after=a.get("after", 0), limit=a.get("limit", 50))
        if what == "pending":
            return _plain(await h.pending.aio())
        if what == "audit":
            return await h.audit.aio(a.get("after", 0), a.get("limit", 100))
        if what == "metrics":
            stats, meta = await asyncio.gather(h.stats_async(), h.meta.aio())
            return {"time": time.time(), "version": meta.version, "tick": meta.tick, **stats}
        raise RequestError(f"no read {what[:40]!r}", code="bad_argument")


def _placement(namespace: str) -> list[dict[str, Any]]:
    from actors.cluster.directory_handle import existing_directory
    from actors.cluster.status import placement_table

    handle = existing_directory(namespace)
    return [] if handle is None else placement_table(handle)
