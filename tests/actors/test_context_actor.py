"""The context actor as a plain class, without Ray: group commit, hostile payloads, typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest

from actors.client.handle import ContextHandle, decode_receipt
from actors.client.replies import open_reply, rebuild_error
from actors.server.context_actor import ContextActor
from protocol.errors import (
    MorphzError,
    NotFound,
    OutOfRange,
    ParseError,
    RequestError,
    StoreError,
    StoreLocked,
    TransportError,
    WireError,
)
from protocol.receipts import Receipt
from protocol.txlang import parse_tx
from protocol.txwire import tx_to_msgpack
from protocol.wire import MAX_PAYLOAD_BYTES, WIRE_VERSION, pack
from storage import check_context_name

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def submit(actor: ContextActor, text: str, client_id: str | None = None) -> Receipt:
    _, payload = ContextHandle.prepare(text, client_id)
    return decode_receipt(run(actor.submit(payload)))


def test_concurrent_submissions_share_durable_writes(actor: ContextActor) -> None:
    async def main() -> list[bytes]:
        payloads = [
            ContextHandle.prepare(f"(context-tx (base-version 0) (derive n{i} (i {i})))")[1]
            for i in range(60)
        ]
        return await asyncio.gather(*(actor.submit(p) for p in payloads))

    receipts = [decode_receipt(raw) for raw in run(main())]
    assert all(r.committed for r in receipts)
    assert sorted(r.version for r in receipts) == list(range(1, 61))
    assert sum(r.rebased for r in receipts) == 59
    stats = run(actor.stats())
    assert stats["transactions"] == 60
    assert stats["batches"] < 60
    assert stats["largest_batch"] > 1
    assert stats["pending"] == 0


def test_batch_cap_splits_a_burst(tmp_path: Path) -> None:
    a = ContextActor(str(tmp_path), "ctx", max_batch=4)
    try:

        async def main() -> list[bytes]:
            payloads = [
                ContextHandle.prepare(f"(context-tx (base-version 0) (derive n{i}))")[1]
                for i in range(20)
            ]
            return await asyncio.gather(*(a.submit(p) for p in payloads))

        assert all(decode_receipt(raw).committed for raw in run(main()))
        stats = run(a.stats())
        assert stats["largest_batch"] <= 4 and stats["batches"] >= 5
    finally:
        a.close()


def test_a_retried_client_id_is_applied_once(actor: ContextActor) -> None:
    first = submit(actor, "(context-tx (base-version 0) (derive a (x 1)))", "c-1")
    again = submit(actor, "(context-tx (base-version 0) (derive a (x 1)))", "c-1")
    assert first.committed and again.committed and again.duplicate
    assert again.version == first.version == 1
    assert open_reply(run(actor.version())) == 1


def test_conflicting_transactions_in_one_batch(actor: ContextActor) -> None:
    assert submit(actor, "(context-tx (base-version 0) (derive a (x 0)))").committed

    async def main() -> list[bytes]:
        payloads = [
            ContextHandle.prepare(f"(context-tx (base-version 1) (revise a (x {i})))")[1]
            for i in (1, 2)
        ]
        return await asyncio.gather(*(actor.submit(p) for p in payloads))

    first, second = (decode_receipt(raw) for raw in run(main()))
    assert first.committed and first.version == 2
    assert second.status == "rejected" and second.errors[0].code == "conflict"
    assert [(c.id, c.version) for c in second.conflicts] == [("a", 2)]


HOSTILE = {
    "empty": b"",
    "garbage": b"\x01\xc1\xc1\xc1",
    "wrong version": bytes((WIRE_VERSION + 1,)) + msgpack.packb({"base_version": 0}),
    "not a transaction": pack({"hello": "world"}),
    "trailing bytes": tx_to_msgpack(parse_tx("(context-tx (base-version 0) (derive a))")) + b"\x00",
    "truncated": tx_to_msgpack(parse_tx("(context-tx (base-version 0) (derive a (x 1)))"))[:-3],
    "oversize": bytes((WIRE_VERSION,)) + b"\xc0" * MAX_PAYLOAD_BYTES,
    "not bytes": "(context-tx (base-version 0) (derive a))",
    "deep": bytes((WIRE_VERSION,)) + b"\x91" * 5000 + b"\xc0",
}


@pytest.mark.parametrize("payload", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_payloads_get_a_typed_rejection(actor: ContextActor, payload: object) -> None:
    before = open_reply(run(actor.version()))
    receipt = decode_receipt(run(actor.submit(payload)))  # type: ignore[arg-type]
    assert receipt.status == "rejected"
    assert [e.code for e in receipt.errors] == ["wire_error"]
    assert receipt.errors[0].op is None and receipt.errors[0].message
    assert receipt.version == before
    assert open_reply(run(actor.version())) == before
    assert run(actor.stats())["wire_rejections"] == 1
    assert submit(actor, "(context-tx (base-version 0) (derive a))").committed


def test_refused_requests_keep_their_class(actor: ContextActor) -> None:
    with pytest.raises(NotFound, match="no frame"):
        open_reply(run(actor.frame("nope")))
    with pytest.raises(NotFound):
        open_reply(run(actor.txlog(7)))
    with pytest.raises(RequestError, match="frame id must be a string") as info:
        open_reply(run(actor.frame(12)))  # type: ignore[arg-type]
    assert info.value.code == "bad_argument"
    with pytest.raises(OutOfRange):
        open_reply(run(actor.read_event("@e1", -1)))
    with pytest.raises(RequestError) as kind:
        open_reply(run(actor.observe("gossip", "hello")))
    assert kind.value.code == "bad_kind"


def test_error_maps_round_trip() -> None:
    for exc in (NotFound("x"), StoreLocked("y"), ParseError("bad", 2, 3), WireError("w")):
        back = rebuild_error(open_reply_error(exc))
        assert type(back) is type(exc)
        assert (back.code, back.message) == (exc.code, exc.message)
    parse = rebuild_error(open_reply_error(ParseError("bad", 2, 3)))
    assert isinstance(parse, ParseError) and (parse.line, parse.column) == (2, 3)
    # a follower-less write's refusal keeps its class, so a caller's retry on it works
    unacked = TransportError("only 0 of 1 followers", code="replicas_unavailable")
    back = rebuild_error(open_reply_error(unacked))
    assert type(back) is TransportError and back.code == "replicas_unavailable"

    class MapFull(StoreError):  # a store's own class travels as its nearest known ancestor
        code = "map_full"

    assert type(rebuild_error(open_reply_error(MapFull("full")))) is StoreError
    unknown = rebuild_error({"type": "KeyError", "code": "x", "message": "m"})
    assert type(unknown) is MorphzError and unknown.code == "x"


def open_reply_error(exc: MorphzError) -> dict[str, object]:
    from actors.client.replies import error_doc

    return error_doc(exc)


def test_observations_with_an_event_id_are_idempotent(actor: ContextActor) -> None:
    item = ["tool_result", "412 passed", "main", "ev:" + "ab" * 10]
    first = open_reply(run(actor.observe_many([item])))[0]
    again = open_reply(run(actor.observe_many([item])))[0]
    assert first == {"ref": "@e1", "id": item[3], "duplicate": False}
    assert again == {**first, "duplicate": True}
    with pytest.raises(RequestError) as reused:
        open_reply(run(actor.observe_many([["tool_result", "a different text", "main", item[3]]])))
    assert reused.value.code == "event_id_reused"
    with pytest.raises(RequestError) as bad:
        open_reply(run(actor.observe_many([["tool_result", "x", "main", "ev:nothex"]])))
    assert bad.value.code == "bad_event_id"


def test_claim_snapshot_history_and_export(actor: ContextActor) -> None:
    ref = open_reply(run(actor.observe("tool_result", "regression: 412 passed")))["ref"]
    assert open_reply(run(actor.claim()))["claimed"] == [ref]
    receipt = submit(
        actor, f"(context-tx (base-version 0) (derive test-result (from {ref}) (tests passed)))"
    )
    assert receipt.committed and receipt.tick == 1
    snap = open_reply(run(actor.snapshot(["test-result", "missing"])))
    assert snap["version"] == 1 and snap["frames"]["missing"] is None
    assert snap["frames"]["test-result"]["revision"] == 1
    assert open_reply(run(actor.history("test-result")))[0]["body"] == "(tests passed)"
    assert open_reply(run(actor.read_event(ref, 0, 10)))["text"] == "regression"
    for i in range(4):
        submit(actor, f"(context-tx (base-version 0) (derive n{i}))")
    page = open_reply(run(actor.export(0, 2)))
    assert [r["version"] for r in page["log"]] == [1, 2] and page["more"]
    assert page["frames"] == []
    last = open_reply(run(actor.export(4, 2)))
    assert [r["version"] for r in last["log"]] == [5] and not last["more"]
    assert sorted(f["id"] for f in last["frames"]) == ["n0", "n1", "n2", "n3", "test-result"]
    assert [e["seq"] for e in last["events"]] == [1]
    assert last["window"] == 8 and last["history_keep"] == 100_000


def test_open_failures_are_answered_not_raised(tmp_path: Path, actor: ContextActor) -> None:
    missing = ContextActor(str(tmp_path), "absent", create=False)
    with pytest.raises(NotFound):
        open_reply(run(missing.version()))
    assert rebuild_error(run(missing.describe())["open_error"]).__class__ is NotFound
    _, payload = ContextHandle.prepare("(context-tx (base-version 0) (derive a))")
    from protocol.wire import unpack

    assert unpack(run(missing.submit(payload)))["error"]["type"] == "NotFound"
    # the fixture's actor holds the writer lock
    twice = ContextActor(str(tmp_path), "ctx", lock_wait=0.1)
    with pytest.raises(StoreLocked):
        open_reply(run(twice.state()))


def test_window_and_history_keep_apply_at_creation(tmp_path: Path) -> None:
    a = ContextActor(str(tmp_path), "tuned", window=3, history_keep=2)
    try:
        meta = open_reply(run(a.meta()))
        assert (meta["window"], meta["history_keep"]) == (3, 2)
        for i in range(3):
            submit(a, f"(context-tx (base-version {i}) (derive n{i}))")
        old = submit(a, "(context-tx (base-version 0) (derive late))")
        assert old.errors[0].code == "too_old"
    finally:
        a.close()


def test_context_names_follow_the_store_layout() -> None:
    assert check_context_name("release-7.b_x") == "release-7.b_x"
    for bad in ("", "../etc", "a/b", "-x", "x" * 65, 3):
        with pytest.raises(RequestError):
            check_context_name(bad)
