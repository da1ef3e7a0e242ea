"""SubmitBatcher: transactions arriving together reach a real context actor in one
``submit_many``; each caller gets its own receipt or its own error."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.client.batching import SubmitBatcher
from actors.client.handle import ContextHandle
from actors.client.transport import Call
from actors.server.context_actor import ContextActor
from protocol.errors import NotFound, TransportError


class _Direct:
    """A transport calling a plain ContextActor in this event loop (the actor is real:
    its inbox, its LMDB store); it counts the calls and the transactions in each. With
    *hold*, a call waits for ``release`` before it reaches the actor, so a test decides
    what arrives while a call is out instead of racing a clock."""

    def __init__(self, actor: ContextActor, fail: bool = False, hold: bool = False) -> None:
        self.actor = actor
        self.sizes: list[int] = []
        self.fail = fail
        self.release = asyncio.Event() if hold else None

    async def call_async(self, call: Call[Any]) -> Any:
        assert call.method == "submit_many"
        self.sizes.append(len(call.args[0]))
        if self.release is not None:
            await self.release.wait()
        if self.fail:
            raise TransportError("the actor is gone", code="actor_unavailable")
        return call.decode(await self.actor.submit_many(*call.args))


def _payload(text: str) -> bytes:
    return ContextHandle.prepare(text)[1]


def test_transactions_arriving_together_share_calls_each_its_own_receipt(
    tmp_path: Path,
) -> None:
    actor = ContextActor(str(tmp_path), "ctx")

    async def crowd() -> tuple[_Direct, SubmitBatcher, list[Any]]:
        transport = _Direct(actor, hold=True)
        batcher = SubmitBatcher(transport)  # type: ignore[arg-type]
        texts = [f"(context-tx (base-version 0) (derive n{i} (step {i})))" for i in range(45)]
        texts[7] = "(context-tx (base-version 0) (revise missing (step 7)))"  # rejected
        payloads = [_payload(t) for t in texts]
        payloads[9] = b"\x01not msgpack"  # undecodable: its own wire rejection
        first = [asyncio.ensure_future(batcher.submit(p)) for p in payloads[:20]]
        while not transport.sizes:  # one turn of the loop: the first 20 are one call
            await asyncio.sleep(0)
        rest = [asyncio.ensure_future(batcher.submit(p)) for p in payloads[20:]]
        await asyncio.sleep(0)
        assert transport.release is not None
        transport.release.set()
        got = await asyncio.gather(*first, *rest, return_exceptions=True)
        lone = await batcher.submit(_payload("(context-tx (base-version 0) (derive alone))"))
        return transport, batcher, [*got, lone]

    try:
        transport, batcher, got = asyncio.run(crowd())
    finally:
        actor.close()
    # the first 20 arrived in one turn: one call; the 25 that arrived while it was out:
    # the next call; a caller arriving alone later waits for no one
    assert transport.sizes == [20, 25, 1]
    assert batcher.calls == 3
    committed = [r for r in got if not isinstance(r, BaseException) and r.committed]
    assert len(committed) == 44
    assert sorted(r.version for r in committed) == list(range(1, 45))
    assert not got[7].committed and got[7].errors
    assert not got[9].committed and got[9].errors[0].code == "wire_error"
    assert got[-1].committed and got[-1].version == 44


def test_a_call_that_fails_as_a_whole_fails_every_caller_in_it(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path), "ctx")
    batcher = SubmitBatcher(_Direct(actor, fail=True))  # type: ignore[arg-type]

    async def crowd() -> list[Any]:
        payloads = [_payload(f"(context-tx (base-version 0) (derive n{i}))") for i in range(5)]
        return await asyncio.gather(*(batcher.submit(p) for p in payloads), return_exceptions=True)

    try:
        got = asyncio.run(crowd())
    finally:
        actor.close()
    assert all(isinstance(e, TransportError) and e.code == "actor_unavailable" for e in got)


def test_a_refused_item_is_that_callers_typed_error(tmp_path: Path) -> None:
    actor = ContextActor(str(tmp_path / "missing" / "deeper"), "ctx", create=False)
    batcher = SubmitBatcher(_Direct(actor))  # type: ignore[arg-type]

    async def one() -> Any:
        return await batcher.submit(_payload("(context-tx (base-version 0) (derive a))"))

    try:
        with pytest.raises(NotFound):
            asyncio.run(one())
    finally:
        actor.close()


def test_a_capability_copy_shares_what_its_transport_learned() -> None:
    from actors.client.transport import Transport

    origin = Transport(None, "ctx:a", label="a")
    origin.replicated = False  # learned from the context directory
    copy = origin.with_capability(b"token")
    assert copy.replicated is False and copy.capability == b"token"
    # a copy of a copy still teaches the first transport (one directory call per context)
    fresh = Transport(None, "ctx:b", label="b")
    second = fresh.with_capability(b"t1").with_capability(b"t2")
    assert second._origin is fresh and second.replicated is None
