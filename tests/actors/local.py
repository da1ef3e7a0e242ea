"""A stand-in for ContextHandle that drives a ContextActor in the test's own event loop.

It decodes replies exactly as the real handle does, so the agent thread's logic
and the actor's group commit run without Ray.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from actors.client.handle import carried
from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from protocol.receipts import Receipt
from protocol.tx import ContextTx
from service.operations import Operations
from service.registry import Operation


class LocalHandle(Operations):
    """The async half of ContextHandle, calling a plain ContextActor directly: every
    registered operation (``await h.snapshot.aio(ids)``) and the calls below."""

    def __init__(self, actor: ContextActor) -> None:
        self.actor = actor

    def invoke(self, op: Operation[Any, Any], args: BaseModel) -> Any:
        raise NotImplementedError("a LocalHandle runs in the test's event loop: use .aio")

    async def invoke_async(self, op: Operation[Any, Any], args: BaseModel) -> Any:
        method = getattr(self.actor, op.name)
        if op.carry is not None:  # a submission: wire bytes, as the handle sends them
            return carried(op)(await method(*op.carry.encode(args)))
        if op.keyed is not None:
            args = op.keyed(args)
        return op.decode(open_reply(await method(*op.wire(args))))

    async def submit_async(
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        receipt: Receipt = await self.submit.aio(tx, client_id)
        return receipt

    async def observe_async(self, kind: str, text: str, *, session: str = "main") -> dict[str, Any]:
        return dict(await self.observe.aio(kind, text, session=session))

    async def claim_async(self) -> dict[str, Any]:
        return dict(await self.claim.aio())
