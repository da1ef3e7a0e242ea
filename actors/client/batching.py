"""Transactions that arrive together go to the context actor together: :class:`SubmitBatcher`.

A server port (the HTTP API) answers many callers of one context at once; each
sending its own ``submit`` costs a Ray call, a reply and an actor wake-up per
transaction. A :class:`SubmitBatcher` sends what arrived in one turn of the event loop
in one ``submit_many`` call at once, and gathers what arrives while that call
is in flight into the next one (up to :data:`~actors.client.names.MAX_SUBMIT_MANY`), so
a lone caller waits no longer than before and a crowd shares calls. Each
transaction is still decided on its own (one rejected or refused changes
nothing for the others) with its own client id, so a retried call applies none
twice (R25); each caller gets its own receipt or its own typed error.

Calls of one batcher carry one capability: a server keeps one batcher per
context and token.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.client.names import MAX_CALL_BYTES, MAX_SUBMIT_MANY
from actors.client.replies import raise_error
from actors.client.transport import Call, Transport
from protocol.errors import MorphzError, WireError
from protocol.receipts import Receipt
from protocol.wire import unpack

__all__ = ["SubmitBatcher"]

_Item = tuple[bytes, "asyncio.Future[Receipt]"]


def _one(raw: Any) -> Receipt | MorphzError:
    """One item of a ``submit_many`` reply: its receipt, or the typed error refusing it."""
    try:
        doc = unpack(raw)
        if isinstance(doc, dict) and "error" in doc and "status" not in doc:
            raise_error(doc["error"])
        return Receipt.from_dict(doc)
    except MorphzError as e:
        return e
    except Exception as e:  # pydantic's ValidationError, or a non-dict
        return WireError(f"malformed receipt from the context actor: {e}")


def _each(raw: Any) -> list[Receipt | MorphzError]:
    if not isinstance(raw, list):  # the whole call was refused: an error envelope
        refused = _one(raw)
        if isinstance(refused, Receipt):
            raise WireError("submit_many answered one receipt, not a list")
        raise refused
    return [_one(item) for item in raw]


class SubmitBatcher:
    """Sends the wire payloads given to :meth:`submit` through *transport*, together when
    they arrive together (see the module docstring). Use it from one event loop."""

    def __init__(self, transport: Transport, *, max_batch: int = MAX_SUBMIT_MANY) -> None:
        self.transport = transport
        self.max_batch = max(1, min(int(max_batch), MAX_SUBMIT_MANY))
        self._pending: list[_Item] = []
        self._sender: asyncio.Task[None] | None = None
        self.calls = 0
        """``submit_many`` calls made so far (for figures)."""

    async def submit(self, payload: bytes) -> Receipt:
        """Decide one transaction (its wire payload, client id settled); its receipt, or
        the typed error that refused it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Receipt] = loop.create_future()
        self._pending.append((payload, future))
        if self._sender is None or self._sender.done():
            self._sender = loop.create_task(self._send())
        return await future

    async def _send(self) -> None:
        while self._pending:
            # at most max_batch payloads and MAX_CALL_BYTES bytes (the actor's budget of one
            # call), so a crowd of big transactions is not refused whole as overloaded
            size = count = 0
            for payload, _ in self._pending[: self.max_batch]:
                if count and size + len(payload) > MAX_CALL_BYTES:
                    break
                size, count = size + len(payload), count + 1
            batch = self._pending[:count]
            del self._pending[:count]
            self.calls += 1
            try:
                results = await self.transport.call_async(
                    Call("submit_many", ([p for p, _ in batch],), _each)
                )
                if len(results) != len(batch):
                    raise WireError(f"{len(results)} receipts for {len(batch)} transactions")
            except asyncio.CancelledError:
                for _, future in batch + self._pending:
                    future.cancel()
                raise
            except Exception as e:  # the call failed as a whole: every caller hears it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # the caller went away; its transaction is decided anyway
                    continue
                if isinstance(result, MorphzError):
                    future.set_exception(result)
                else:
                    future.set_result(result)
