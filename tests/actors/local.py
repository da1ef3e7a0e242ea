"""A stand-in for ContextHandle that drives a ContextActor in the test's own event loop.

It decodes replies exactly as the real handle does, so the agent thread's logic
and the actor's group commit run without Ray.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from actors.client.handle import ContextHandle, _receipt
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
        return op.decode(open_reply(await getattr(self.actor, op.name)(*op.wire(args))))

    async def submit_async(
        self, tx: ContextTx | str, client_id: str | None = None, *, timeout: float | None = None
    ) -> Receipt:
        _, payload = ContextHandle.prepare(tx, client_id)
        return _receipt(await self.actor.submit(payload))

    async def observe_async(self, kind: str, text: str, *, session: str = "main") -> dict[str, Any]:
        item = ContextHandle._observation(kind, text, session)
        return dict(open_reply(await self.actor.observe_many([item]))[0])

    async def claim_async(self) -> dict[str, Any]:
        return dict(open_reply(await self.actor.claim()))
