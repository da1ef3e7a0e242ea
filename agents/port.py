"""How an agent loop reaches a context: the :class:`ContextPort` protocol, which a Ray
:class:`~actors.client.handle.ContextHandle` satisfies, and :class:`EmbeddedPort`, the same calls
on an embedded :class:`~service.context.Context`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from protocol.compiler import CompilerConfig
from protocol.receipts import Receipt
from protocol.turns import CompiledInput
from service.context import Context
from service.operations import Operations
from service.registry import Operation

T = TypeVar("T")


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


class EmbeddedPort(Operations):
    """:class:`ContextPort` over an embedded :class:`~service.context.Context`: every
    registered operation (:mod:`service.operations`) runs on the context, so each call
    has the signature and the reply a :class:`~actors.client.handle.ContextHandle` has.

    The compile cache and the search index are the context's own
    (:meth:`~service.context.Context.compile`, :meth:`~service.context.Context.search`);
    *index* is a :class:`~storage.search.LexicalIndex` to search instead of the
    one beside the context's store. Not thread-safe, like the context.
    """

    def __init__(self, ctx: Context, index: Any = None) -> None:
        self.ctx = ctx
        if index is not None:
            ctx.use_index(index)

    def invoke(self, op: Operation[Any, T], args: BaseModel) -> T:
        """Run a registered operation on the context."""
        return self.ctx.invoke(op, args)

    async def invoke_async(self, op: Operation[Any, T], args: BaseModel) -> T:
        """:meth:`invoke` inside a coroutine (in the loop's thread)."""
        return self.ctx.invoke(op, args)

    def close(self) -> None:
        """Close the context's search index (it reopens at the next search)."""
        self.ctx.searcher.close()
