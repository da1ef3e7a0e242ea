"""``submit_many``: several transactions in one call to the context actor, each decided on its
own, in order, with its own receipt; a retried call applies none twice; bad input is refused
before anything is decided."""

from __future__ import annotations

import pytest

from actors import ContextHandle
from actors.client.names import MAX_SUBMIT_MANY, actor_name
from protocol.errors import RequestError
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.tx import ContextTx, Derive, Revise
from protocol.wire import unpack

pytestmark = pytest.mark.ray


def _derive(frame: str, base: int, n: int = 0) -> ContextTx:
    return ContextTx(base_version=base, ops=(Derive(id=frame, body=((Symbol("n"), n),)),))


def test_each_transaction_is_decided_on_its_own_in_order(handle: ContextHandle) -> None:
    base = handle.version()
    txs = [_derive("a", base), _derive("b", base), _derive("a", base, 9), _derive("c", base)]
    receipts = handle.submit_many(txs)
    assert [r.status for r in receipts] == ["committed", "committed", "rejected", "committed"]
    assert receipts[2].errors[0].code == "conflict"  # "a" changed after the base
    assert [r.version for r in receipts if r.committed] == [base + 1, base + 2, base + 3]
    assert handle.frame("a").body == "(n 0)"
    # the same transactions again (same client ids): duplicates, nothing applied twice
    again = handle.submit_many(
        [
            tx.model_copy(update={"client_id": r.client_id})
            for tx, r in zip(txs, receipts, strict=True)
        ]
    )
    assert [r.duplicate for r in again] == [True, True, False, True]
    assert handle.version() == base + 3


def test_a_stale_revise_in_a_batch_carries_the_frame_as_it_stands(handle: ContextHandle) -> None:
    base = handle.version()
    assert handle.submit(_derive("hot", base)).committed
    now = handle.version()
    first = ContextTx(base_version=now, ops=(Revise(id="hot", body=((Symbol("n"), 1),)),))
    stale = ContextTx(base_version=now, ops=(Revise(id="hot", body=((Symbol("n"), 2),)),))
    won, lost = handle.submit_many([first, stale])
    assert won.committed and not lost.committed
    assert lost.errors[0].code == "conflict"
    assert [(c.id, c.body) for c in lost.current] == [("hot", "(n 1)")]


def test_bad_submit_many_input_is_refused_and_changes_nothing(
    handle: ContextHandle, context_name: str, namespace: str
) -> None:
    import ray

    version = handle.version()
    with pytest.raises(RequestError):
        handle.submit_many([])
    with pytest.raises(RequestError):
        handle.submit_many(_derive("x", version))  # type: ignore[arg-type]
    with pytest.raises(RequestError):
        handle.submit_many("(context-tx (base-version 0) (derive x (n 0)))")  # type: ignore[arg-type]
    with pytest.raises(RequestError):
        handle.submit_many([_derive(f"x{i}", version) for i in range(MAX_SUBMIT_MANY + 1)])
    # past the handle's checks: the actor refuses a call that is not a list of payloads
    actor = ray.get_actor(actor_name(context_name), namespace=namespace)
    for bad in (b"junk", ["not bytes"], [], [b"x"] * (MAX_SUBMIT_MANY + 1)):
        reply = ray.get(actor.submit_many.remote(bad))
        assert isinstance(reply, bytes) and unpack(reply)["error"]["code"] == "bad_argument"
    # a payload that does not decode gets a wire_error receipt; the others their own
    good = handle.prepare(_derive("y", version))[1]
    replies = ray.get(actor.submit_many.remote([b"\x01junk", good]))
    first, second = (Receipt.from_dict(unpack(r)) for r in replies)
    assert first.errors[0].code == "wire_error" and second.committed
    assert handle.version() == version + 1
