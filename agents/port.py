"""How an agent loop reaches a context: the :class:`ContextPort` protocol, which a Ray
:class:`~actors.client.handle.ContextHandle` satisfies, and :class:`EmbeddedPort`, the same calls
on an embedded :class:`~service.context.Context`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from protocol.compiler import CompilerConfig
from protocol.receipts import Receipt
from protocol.replies import (
    ClaimReply,
    DeliverReply,
    EventPage,
    EventReply,
    ObserveReply,
    RecallReply,
    SearchReply,
)
from protocol.turns import CompiledInput
from service.context import Context


class ContextPort(Protocol):
    """What the loop needs of a context; an embedded adapter and ``ContextHandle`` both offer it."""

    def observe(self, kind: str, text: str, *, session: str = "main") -> Mapping[str, Any]:
        """Record an observation; ``{"ref", "id", …}``."""

    def claim(self) -> Mapping[str, Any]:
        """Claim the waiting inputs as one batch: ``{"tick", "advanced", "claimed", …}``."""

    def submit(self, tx: str) -> Receipt:
        """Decide one transaction (S-expression text) and return its receipt."""

    def deliver(self, ref: str) -> Mapping[str, Any]:
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

    def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> Mapping[str, Any]:
        """A chunk of an observation's original text (R28)."""


class EmbeddedPort:
    """:class:`ContextPort` over an embedded :class:`~service.context.Context`: each call is
    the service method of the same name, answered in the shape a
    :class:`~actors.client.handle.ContextHandle` answers.

    The compile cache and the search index are the context's own
    (:meth:`~service.context.Context.compile`, :meth:`~service.context.Context.search`);
    *index* is a :class:`~storage.search.LexicalIndex` to search instead of the
    one beside the context's store. Not thread-safe, like the context.
    """

    def __init__(self, ctx: Context, index: Any = None) -> None:
        self.ctx = ctx
        if index is not None:
            ctx.use_index(index)

    def observe(
        self, kind: str, text: str, *, session: str = "main", event_id: str | None = None
    ) -> ObserveReply:
        """Record an observation (under *event_id* when given: idempotent)."""
        if event_id is None:
            return self.ctx.observe(kind, text, session=session)
        return self.observe_many([(kind, text, session, event_id)])[0]

    def observe_many(self, items: list[tuple[str, str, str, str | None]]) -> list[ObserveReply]:
        """Record ``(kind, text, session, event_id|None)`` items in one durable write."""
        return self.ctx.observe_batch(items)

    def event(self, ref: str) -> EventReply:
        """An event's metadata by ``@eN`` or stable id; NotFound."""
        return self.ctx.event(ref)

    def claim(self) -> ClaimReply:
        """Claim the waiting inputs as one batch."""
        return self.ctx.claim()

    def submit(self, tx: str) -> Receipt:
        """Commit one transaction."""
        return self.ctx.commit(tx)

    def deliver(self, ref: str) -> DeliverReply:
        """Mark a request delivered."""
        return self.ctx.deliver(ref)

    def compile(
        self,
        session: str,
        config: CompilerConfig,
        previous: CompiledInput | None = None,
        overflow: bool = False,
    ) -> CompiledInput:
        """The model input for *session*, through the context's compiler of that session."""
        return self.ctx.compile(session, config, previous, overflow)

    def record_trace(self, trace: dict[str, Any]) -> None:
        """Append a trace."""
        self.ctx.record_trace(trace)

    def read_event(self, ref: str, offset: int = 0, length: int | None = None) -> EventPage:
        """Read an event's text."""
        return self.ctx.read_event(ref, offset, length)

    def search(self, args: dict[str, Any], session: str) -> SearchReply:
        """A model's search as a ``recall_result``: ``{"ref", "hits", "recalled", "lag"}``."""
        return self.ctx.search(args, session)

    def close(self) -> None:
        """Close the context's search index (it reopens at the next search)."""
        self.ctx.searcher.close()

    def recall_observation(
        self, request: dict[str, Any], session: str, cursor: str | None = None
    ) -> RecallReply:
        """Recall one page and record it as a ``recall_result`` observation (the
        handle's :class:`RecallReply`)."""
        return self.ctx.recall_observation(request, cursor, session=session)
