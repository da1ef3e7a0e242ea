"""Observations, claims and deliveries ride the context actor's group write (without Ray).

A write declared with a ``step`` (service.operations: observe, observe_many, claim,
deliver) is served through the group-commit inbox: arriving with transactions, it is made
durable by the same LMDB write, each caller answered its own reply or typed error once
that write returned. Counted on the real LMDB environment (its last transaction id), not
on the inbox's own figures alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from actors.client.handle import ContextHandle, decode_receipt
from actors.client.replies import open_reply
from actors.server.context_actor import ContextActor
from protocol.errors import NotFound, RequestError
from service.observations import new_event_id
from service.store import open_context

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def lmdb_writes(actor: ContextActor) -> int:
    """LMDB's last write-transaction id of the actor's store: +1 per durable write."""
    env = actor._context().backend._env().env  # type: ignore[attr-defined]
    return int(env.info()["last_txnid"])


def payload(text: str, client_id: str | None = None) -> bytes:
    return ContextHandle.prepare(text, client_id)[1]


def outcome(raw: bytes) -> Any:
    """The reply's value, or the typed error it carries (raised by open_reply)."""
    try:
        return open_reply(raw)
    except (RequestError, NotFound) as e:
        return e


def test_observation_claim_and_transaction_arriving_together_share_one_write(
    actor: ContextActor, tmp_path: Path
) -> None:
    eid = new_event_id()

    async def together() -> list[bytes]:
        return await asyncio.gather(
            actor.observe("tool_result", "412 passed", session="s", event_id=eid),
            actor.observe("tool_result", "412 passed", session="s", event_id=eid),  # a retry
            actor.claim(),
            actor.submit(payload("(context-tx (base-version 0) (derive note (n 1)))", "c-1")),
            actor.submit(payload("(context-tx (base-version 0) (derive note (n 1)))", "c-1")),
        )

    before = lmdb_writes(actor)
    first, retry, claimed, tx, tx_again = run(together())
    assert lmdb_writes(actor) == before + 1  # all five in one durable write

    first, retry, claimed = open_reply(first), open_reply(retry), open_reply(claimed)
    assert first["duplicate"] is False and retry["duplicate"] is True  # exactly once
    assert retry["ref"] == first["ref"] and retry["id"] == eid
    assert claimed["claimed"] == [first["ref"]] and claimed["advanced"] is True
    receipt, again = decode_receipt(tx), decode_receipt(tx_again)
    assert receipt.committed and receipt.version == 1 and receipt.tick == claimed["tick"]
    assert again.duplicate and again.version == 1  # the client id: applied once

    stats = run(actor.stats())
    assert stats["writes"] == 1 and stats["joined"] == 3
    assert stats["batches"] == 1 and stats["transactions"] == 2

    # what was answered is on disk: the store reopened after the actor closed
    actor.close()
    ctx = open_context(str(tmp_path), "ctx", create=False, readonly=True)
    try:
        assert ctx.read_event(first["ref"]).text == "412 passed"
        assert ctx.meta().tick == claimed["tick"] and ctx.meta().version == 1
        assert ctx.frame("note").id == "note"
    finally:
        ctx.close()


def test_a_refused_observation_does_not_fail_the_transactions_beside_it(
    actor: ContextActor,
) -> None:
    eid = new_event_id()
    open_reply(run(actor.observe("tool_result", "original", event_id=eid)))

    async def together() -> list[bytes]:
        return await asyncio.gather(
            actor.observe("tool_result", "a different text", event_id=eid),  # refused
            actor.submit(payload("(context-tx (base-version 0) (derive a (n 1)))")),
            actor.deliver("@e99"),  # refused: no such event
            actor.observe("tool_result", "fine", session="other"),
            actor.submit(payload("(context-tx (base-version 0) (derive b (n 2)))")),
        )

    before = lmdb_writes(actor)
    reused, a, missing, fine, b = run(together())
    assert lmdb_writes(actor) == before + 1  # the refusals did not break the group up

    reused, missing, fine = outcome(reused), outcome(missing), outcome(fine)
    assert isinstance(reused, RequestError) and reused.code == "event_id_reused"
    assert isinstance(missing, NotFound)
    assert fine["duplicate"] is False
    assert decode_receipt(a).committed and decode_receipt(b).committed
    assert open_reply(run(actor.version())) == 2
    assert open_reply(run(actor.read_event(fine["ref"])))["text"] == "fine"
    # the refused observation changed nothing: the original text is still the event's
    assert open_reply(run(actor.read_event("@e1")))["text"] == "original"


def test_a_batch_refused_halfway_writes_nothing_and_the_others_still_commit(
    actor: ContextActor,
) -> None:
    eid = new_event_id()
    open_reply(run(actor.observe("tool_result", "original", event_id=eid)))
    # its first item is new and recorded in the shared write before the second is refused:
    # the shared write is abandoned and every item decided again in a write of its own
    batch = [("tool_result", "new one", "main"), ("tool_result", "clash", "main", eid)]

    async def together() -> list[bytes]:
        return await asyncio.gather(
            actor.submit(payload("(context-tx (base-version 0) (derive a (n 1)))")),
            actor.observe_many(batch),
            actor.observe("tool_result", "kept", session="k"),
        )

    a, many, kept = run(together())
    refused = outcome(many)
    assert isinstance(refused, RequestError) and refused.code == "event_id_reused"
    assert decode_receipt(a).committed
    assert open_reply(kept)["duplicate"] is False
    # nothing of the refused batch: the original and the one kept, no more
    assert len(open_reply(run(actor.state()))["events"]) == 2
    assert open_reply(run(actor.read_event("@e2")))["text"] == "kept"


def test_recalls_recorded_as_observations_share_the_write_of_what_arrives_with_them(
    actor: ContextActor,
) -> None:
    assert decode_receipt(
        run(actor.submit(payload("(context-tx (base-version 0) (derive note (n 1)))")))
    ).committed

    async def together() -> list[bytes]:
        return await asyncio.gather(
            actor.recall_observation({"frame_id": "note"}, session="s"),
            actor.submit(payload("(context-tx (base-version 1) (derive other (n 2)))")),
            actor.recall_recorded({"frame_id": "note"}, session="s"),
            actor.recall_observation({"frame_id": "nowhere"}),  # refused: no such frame
            actor.claim(),
        )

    before = lmdb_writes(actor)
    observed, tx, recorded, missing, claimed = run(together())
    assert lmdb_writes(actor) == before + 1  # the recalls rode the transaction's write

    observed = open_reply(observed)
    assert observed["recalled"] == ["note"] and observed["nodes"] >= 1
    page, event = open_reply(recorded)
    assert [n["id"] for n in page["nodes"] if n["type"] == "frame"] == ["note"]
    assert event["kind"] == "recall_result" and event["extra"]["recalled"] == ["note"]
    assert isinstance(outcome(missing), NotFound)
    assert decode_receipt(tx).committed
    # both recalls are observations waiting for the claim that came with them
    refs = [observed["ref"], "@e" + str(event["seq"])]
    assert sorted(open_reply(claimed)["claimed"]) == sorted(refs)
    stats = run(actor.stats())
    assert stats["joined"] == 4 and stats["batches"] == 2  # three recalls and the claim
    # what the model was shown is the recorded observation's text
    assert "note" in open_reply(run(actor.read_event(observed["ref"])))["text"]


def test_observe_and_claim_is_one_call_and_one_write_with_the_history_of_the_two(
    actor: ContextActor, tmp_path: Path
) -> None:
    # the same inputs through the two calls, on a second store
    two = ContextActor(str(tmp_path / "two"), "ctx")
    try:
        eid = new_event_id()
        for a in (actor, two):
            receipt = decode_receipt(
                run(a.submit(payload("(context-tx (base-version 0) (derive note (n 1)))", "c-1")))
            )
            assert receipt.committed
            open_reply(run(a.observe("user_message", "first", session="s")))  # waits

        before = lmdb_writes(actor)
        both = open_reply(
            run(actor.observe_and_claim("tool_result", "412", session="s", event_id=eid))
        )
        assert lmdb_writes(actor) == before + 1  # one call, one durable write
        before = lmdb_writes(two)
        observed = open_reply(run(two.observe("tool_result", "412", session="s", event_id=eid)))
        claimed = open_reply(run(two.claim()))
        assert lmdb_writes(two) == before + 2

        assert both == {**observed, **claimed}  # the two replies in one map
        assert both["claimed"] == ["@e1", "@e2"] and both["advanced"] is True
        for a in (actor, two):  # the same history: events, tick, version
            assert open_reply(run(a.meta()))["tick"] == both["tick"]
            assert open_reply(run(a.version())) == both["version"]
            event = open_reply(run(a.read_event("@e2")))
            assert (event["id"], event["text"]) == (eid, "412")
        events = open_reply(run(actor.state()))["events"]
        assert events == open_reply(run(two.state()))["events"]
        assert [(e["ref"], e["kind"]) for e in events] == [
            ("@e1", "user_message"),
            ("@e2", "tool_result"),
        ]

        # a retry under the same event id records nothing twice; it claims what waits then
        again = open_reply(
            run(actor.observe_and_claim("tool_result", "412", session="s", event_id=eid))
        )
        assert again["duplicate"] is True and again["ref"] == "@e2"
        assert again["claimed"] == [] and again["advanced"] is False
    finally:
        two.close()


def test_a_refused_observe_and_claim_commits_nothing(actor: ContextActor) -> None:
    eid = new_event_id()
    open_reply(run(actor.observe("tool_result", "original", event_id=eid)))
    waiting = open_reply(run(actor.observe("user_message", "still waiting")))
    meta = open_reply(run(actor.meta()))
    before = lmdb_writes(actor)

    reused = outcome(run(actor.observe_and_claim("tool_result", "other text", event_id=eid)))
    assert isinstance(reused, RequestError) and reused.code == "event_id_reused"
    bad = outcome(run(actor.observe_and_claim("tool_result", 412)))  # not text
    assert isinstance(bad, RequestError) and bad.code == "bad_argument"

    assert lmdb_writes(actor) == before  # nothing written, not even the claim
    assert open_reply(run(actor.meta())) == meta
    assert len(open_reply(run(actor.state()))["events"]) == 2
    # the input that waited is still waiting: the refused call claimed nothing
    assert open_reply(run(actor.claim()))["claimed"] == ["@e1", waiting["ref"]]
