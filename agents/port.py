"""How an agent loop reaches a context: the :class:`ContextPort` protocol, which a Ray
:class:`~actors.client.ContextHandle` satisfies, and :class:`EmbeddedPort`, the same calls
on an embedded :class:`~service.context.Context`."""

from __future__ import annotations

from typing import Any, Protocol

from protocol.compiler import CompilerConfig
from protocol.receipts import Receipt
from protocol.turns import CompiledInput
from service.context import Context


class ContextPort(Protocol):
    """What the loop needs of a context; an embedded adapter and ``ContextHandle`` both offer it."""

    def observe(self, kind: str, text: str, *, session: str = "main") -> dict[str, Any]:
        """Record an observation; ``{"ref", "id", …}``."""

    def claim(self) -> dict[str, Any]:
        """Claim the waiting inputs as one batch: ``{"tick", "advanced", "claimed", …}``."""

    def submit(self, tx: str) -> Receipt:
        """Decide one transaction (S-expression text) and return its receipt."""

    def deliver(self, ref: str) -> dict[str, Any]:
        """Mark the user request *ref* delivered (R19)."""

    def compile(
        self,
        session: str,
        config: CompilerConfig,
        previous: CompiledInput | None = None,
        overflow: bool = False,
    ) -> CompiledInput:
        """The model input for *session* (see :mod:`protocol.compiler`)."""

    def record_trace(self, trace: dict[str, Any]) -> None:
        """Append a model-call trace (R39)."""

    def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        """A chunk of an observation's original text (R28)."""


class EmbeddedPort:
    """:class:`ContextPort` over an embedded :class:`~service.context.Context`.

    Keeps one :class:`~protocol.compiler.Compiler` per session (its cache).
    Searches use *index* (a :class:`~storage.search.index.LexicalIndex`), else the
    index beside the context's store, opened at the first search and brought
    up to date before each one; :meth:`close` closes an index it opened.
    Not thread-safe, like the context.
    """

    def __init__(self, ctx: Context, index: Any = None) -> None:
        self.ctx = ctx
        self._compilers: dict[str, tuple[CompilerConfig, Any]] = {}
        self._index = index
        self._owns_index = False

    def observe(
        self, kind: str, text: str, *, session: str = "main", event_id: str | None = None
    ) -> dict[str, Any]:
        """Record an observation (under *event_id* when given: idempotent)."""
        if event_id is None:
            e = self.ctx.observe(kind, text, session=session)
            return {"ref": e.ref, "id": e.id, "duplicate": False}
        return self.observe_many([(kind, text, session, event_id)])[0]

    def observe_many(self, items: list[tuple[str, str, str, str | None]]) -> list[dict[str, Any]]:
        """Record ``(kind, text, session, event_id|None)`` items in one durable write."""
        from actors.context_actor import ContextActor, _observe_many

        return _observe_many(self.ctx, ContextActor._check_observations([list(i) for i in items]))

    def event(self, ref: str) -> dict[str, Any]:
        """An event's metadata by ``@eN`` or stable id; NotFound."""
        return self.ctx.event(ref)

    def claim(self) -> dict[str, Any]:
        """Claim the waiting inputs as one batch."""
        return self.ctx.claim().to_dict()

    def submit(self, tx: str) -> Receipt:
        """Commit one transaction."""
        return self.ctx.commit(tx)

    def deliver(self, ref: str) -> dict[str, Any]:
        """Mark a request delivered."""
        return self.ctx.deliver(ref)

    def compile(
        self,
        session: str,
        config: CompilerConfig,
        previous: CompiledInput | None = None,
        overflow: bool = False,
    ) -> CompiledInput:
        """Compile through this session's cached compiler."""
        from protocol.compiler import Compiler

        known = self._compilers.get(session)
        if known is None or known[0] != config:
            known = (config, Compiler(config))
            self._compilers[session] = known
        compiler = known[1]
        return self.ctx.backend.read(
            lambda v: compiler.compile(v, session=session, previous=previous, overflow=overflow)
        )

    def record_trace(self, trace: dict[str, Any]) -> None:
        """Append a trace."""
        self.ctx.record_trace(trace)

    def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        """Read an event's text."""
        return self.ctx.read_event(ref, offset, length)

    def search(self, args: dict[str, Any], session: str) -> dict[str, Any]:
        """A model's search (:func:`storage.search.index.model_search`) as a ``recall_result``."""
        from storage.search.index import LexicalIndex, model_search, search_text

        if self._index is None:
            self._index = LexicalIndex.for_backend(self.ctx.backend)
            self._owns_index = True
        self._index.catch_up(self.ctx.backend)
        result = model_search(self._index, args)
        frames = [h.id for h in result.hits if h.type == "frame"]
        e = self.ctx.observe_retrieval(search_text(result), frames, session=session)
        return {"ref": e.ref, "hits": len(result.hits), "recalled": frames}

    def close(self) -> None:
        """Close the search index if this port opened it."""
        if self._owns_index and self._index is not None:
            self._index.close()
            self._index = None

    def recall_observation(
        self, request: dict[str, Any], session: str, cursor: str | None = None
    ) -> dict[str, Any]:
        """Recall one page and record it as a ``recall_result`` observation."""
        page, e = self.ctx.recall_observation(request, cursor, session=session)
        return {
            "ref": e.ref,
            "nodes": len(page.nodes),
            "edges": len(page.edges),
            "recalled": list(e.extra.get("recalled") or ()),
        }
