"""The client handle's own rules, without Ray: retry delays, client ids, argument checks,
one definition per method for both forms, the transaction text on the wire, typed replies."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from actors.client.handle import ContextHandle, RetryPolicy, new_client_id
from actors.client.replies import open_reply
from actors.client.transport import Call
from actors.server.connect import connect
from protocol.errors import ParseError, RequestError, StoreError, TransportError, WireError
from protocol.replies import ClaimReply, FrameReply, ObserveReply
from protocol.txlang import parse_tx, print_tx
from protocol.txwire import SubmittedTx, submitted_from_msgpack, tx_from_dict, tx_from_msgpack
from protocol.wire import pack


def test_retry_delays_grow_are_capped_and_end() -> None:
    policy = RetryPolicy(attempts=5, initial=0.1, multiplier=2.0, max_delay=0.3)
    rng = random.Random(1)
    delays = [policy.delay(n, rng) for n in range(6)]
    assert delays[-1] is None
    ceilings = [0.1, 0.2, 0.3, 0.3, 0.3]
    for delay, ceiling in zip(delays, ceilings, strict=False):
        assert delay is not None and ceiling / 2 <= delay <= ceiling
    total = sum(d or 0 for d in (RetryPolicy().delay(n) for n in range(10)))
    assert 1.7 < total <= 3.55
    with pytest.raises(RequestError):
        RetryPolicy(multiplier=0.5)


def test_prepare_settles_the_client_id_once() -> None:
    text = "(context-tx (base-version 3) (derive a (x 1)))"
    tx, payload = ContextHandle.prepare(text)
    assert tx.client_id is not None and tx.client_id.startswith("c-")
    assert tx_from_msgpack(payload) == tx
    # the text travels beside the parsed form, as written (parsed here, once)
    assert submitted_from_msgpack(payload) == SubmittedTx(tx, text)
    again, same = ContextHandle.prepare(tx)
    assert again.client_id == tx.client_id
    assert submitted_from_msgpack(same) == SubmittedTx(tx, None)
    assert ContextHandle.prepare(text, tx.client_id)[1] == payload
    named, _ = ContextHandle.prepare(tx, "mine")
    assert named.client_id == "mine"
    assert new_client_id() != new_client_id()
    with pytest.raises(RequestError) as long_id:
        ContextHandle.prepare(text, "x" * 201)
    assert long_id.value.code == "bad_client_id"
    with pytest.raises(ParseError):
        ContextHandle.prepare("(context-tx (base-version 3)")
    with pytest.raises(RequestError):
        ContextHandle.prepare(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"name": "../up"}, "bad_context_name"),
        ({"window": -1}, "bad_argument"),
        ({"history_keep": 0}, "bad_argument"),
        ({"lifetime": "forever"}, "bad_argument"),
        ({"namespace": ""}, "bad_argument"),
        ({"store_dir": 12}, "bad_argument"),
    ],
)
def test_connect_checks_arguments_before_any_remote_call(
    tmp_path: Path, options: dict[str, object], code: str
) -> None:
    args: dict[str, object] = {"name": "ok", "store_dir": tmp_path, **options}
    name = args.pop("name")
    with pytest.raises(RequestError) as info:
        connect(name, **args)  # type: ignore[arg-type]
    assert info.value.code == code


class RecordingTransport:
    """Stands in for the Ray transport: records each call and answers *reply*."""

    def __init__(self, reply: object) -> None:
        self.reply = reply
        self.calls: list[tuple[str, Call[Any]]] = []

    def call(self, call: Call[Any]) -> Any:
        self.calls.append(("sync", call))
        return call.decode(self.reply)

    async def call_async(self, call: Call[Any]) -> Any:
        self.calls.append(("async", call))
        return call.decode(self.reply)


def _handle(reply: object) -> tuple[ContextHandle, RecordingTransport]:
    handle = ContextHandle(object(), "ctx")
    fake = RecordingTransport(reply)
    handle.transport = fake  # type: ignore[assignment]
    return handle, fake


def test_each_method_is_one_definition_with_a_blocking_and_an_async_form() -> None:
    frame = {
        "id": "a",
        "revision": 1,
        "body": "(x 1)",
        "body_forms": [["x", 1]],
        "sources": [],
        "lifecycle": "active",
        "protected": False,
        "created_version": 1,
        "updated_version": 1,
        "tokens": 4,
        "envelope": {"kind": None},
        "relations_out": [],
        "relations_in": [["b", "supports", "a"]],
    }
    handle, fake = _handle(pack({"ok": frame}))
    blocking = handle.frame("a")
    awaited = asyncio.run(handle.frame_async("a"))
    (form1, call1), (form2, call2) = fake.calls
    assert (form1, form2) == ("sync", "async") and call1 == call2
    assert call1.method == "frame" and call1.args == ("a",)
    assert isinstance(blocking, FrameReply) and blocking == awaited == frame
    assert blocking["relations_in"] == [["b", "supports", "a"]] and "due_tick" not in blocking
    assert blocking.due_tick is None and dict(blocking) == frame
    # argument checks run before any remote call, in both forms
    with pytest.raises(RequestError):
        handle.frame(7)  # type: ignore[arg-type]
    with pytest.raises(RequestError):
        asyncio.run(handle.frame_async(7))  # type: ignore[arg-type]
    assert len(fake.calls) == 2
    assert ContextHandle.frame_async.__doc__ == ":meth:`frame` for event loops."
    for name in ("submit", "observe", "claim", "frame", "snapshot", "state", "version"):
        assert callable(getattr(handle, name + "_async")), name


def test_replies_of_a_fixed_shape_are_typed_and_checked() -> None:
    handle, _ = _handle(pack({"ok": {"ref": "@e1", "id": "ev:" + "0" * 20, "duplicate": False}}))
    report = handle.observe("tool_result", "ok")
    assert isinstance(report, ObserveReply) and report.ref == report["ref"] == "@e1"
    claim = {"tick": 1, "advanced": True, "claimed": ["@e1"], "finalized": [], "version": 0}
    handle, _ = _handle(pack({"ok": claim}))
    got = handle.claim()
    assert isinstance(got, ClaimReply) and got["claimed"] == ["@e1"] and got == claim
    # a reply of another shape fails at the boundary, as a WireError
    handle, _ = _handle(pack({"ok": {**claim, "surprise": 1}}))
    with pytest.raises(WireError, match="surprise"):
        handle.claim()
    handle, _ = _handle(pack({"ok": {**claim, "tick": "one"}}))
    with pytest.raises(WireError, match="tick"):
        handle.claim()


def test_a_transport_error_is_a_store_error_with_its_own_class() -> None:
    err = TransportError("unreachable")
    assert isinstance(err, StoreError) and err.code == "actor_unavailable"
    assert TransportError("x", code="actor_error").code == "actor_error"


STORY = (
    '(context-tx (base-version 0) (reason "a log keeps what was written")\n'
    "  (derive release (goal ship-v1) (stage awaiting-tests))\n"
    '  (derive note (said "as written, spaces  kept")))',
    "(context-tx (base-version 1) (revise release (goal ship-v1) (stage packaging)))",
)


def _same_record(a: dict[str, Any], b: dict[str, Any]) -> None:
    a, b = dict(a), dict(b)
    assert a.pop("time") > 0 and b.pop("time") > 0
    assert a == b


def test_text_through_the_handle_is_logged_as_applied(tmp_path: Path) -> None:
    """The handle parses once and ships the text beside the operations; the actor logs the
    operations applied (the log reads back printed from them), never the client's text."""
    from actors.client.handle import decode_receipt
    from actors.server.context_actor import ContextActor
    from service.store import open_context

    embedded = open_context(tmp_path / "embedded", "ctx")
    actor = ContextActor(str(tmp_path / "actor"), "ctx")
    try:
        for i, text in enumerate(STORY):
            cid = f"c-{i}"
            assert embedded.commit(text, client_id=cid).committed
            _, payload = ContextHandle.prepare(text, cid)
            assert decode_receipt(asyncio.run(actor.submit(payload))).committed
            via_actor = open_reply(asyncio.run(actor.txlog(i + 1)))
            # the actor logs the operations applied, read back printed from them
            assert via_actor["text"] == print_tx(tx_from_dict(via_actor["tx"]))
            assert tx_from_dict(via_actor["tx"]).ops == parse_tx(text).ops
        # a model (no text) is logged by its dict form, the same way on both ports
        model = parse_tx("(context-tx (base-version 2) (derive extra (x 1)))")
        assert embedded.commit(model, client_id="c-m").committed
        assert decode_receipt(asyncio.run(actor.submit(ContextHandle.prepare(model, "c-m")[1])))
        via_actor = open_reply(asyncio.run(actor.txlog(3)))
        assert via_actor["tx"] is not None
        _same_record(via_actor, embedded.txlog(3))
    finally:
        actor.close()
        embedded.close()


def test_a_payload_whose_text_lies_is_logged_as_its_operations(tmp_path: Path) -> None:
    """A client may send a text that says other than the operations it carries: the log
    holds what was applied (on main before this change it kept the lie)."""
    from actors.client.handle import decode_receipt
    from actors.server.context_actor import ContextActor
    from protocol.txwire import tx_to_msgpack

    actor = ContextActor(str(tmp_path), "ctx")
    try:
        applied = parse_tx("(context-tx (base-version 0) (derive wipe-prod (run rm-rf)))")
        lie = "(context-tx (base-version 0) (derive harmless (note hello)))"
        assert decode_receipt(asyncio.run(actor.submit(tx_to_msgpack(applied, lie)))).committed
        logged = open_reply(asyncio.run(actor.txlog(1)))
        assert "wipe-prod" in logged["text"] and "harmless" not in str(logged)
    finally:
        actor.close()
