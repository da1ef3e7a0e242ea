"""The context actor's intake (actors/server/intake.py), without Ray: byte budgets per call,
per caller and per inbox refuse a call whole with ``overloaded`` and take nothing; big
payloads are decoded off the event loop, to the same transaction."""

from __future__ import annotations

import asyncio

import pytest

from actors.server.intake import Intake
from protocol.errors import Overloaded, WireError
from protocol.forms import Symbol
from protocol.tx import ContextTx, Derive
from protocol.txwire import SubmittedTx, tx_to_msgpack


def test_each_budget_refuses_a_call_whole_and_takes_nothing() -> None:
    intake = Intake(call_bytes=100, caller_bytes=150, inbox_bytes=200)
    a, b, c = Intake.caller(b"token-a"), Intake.caller(b"token-b"), Intake.caller(b"token-c")
    with pytest.raises(Overloaded) as e:
        intake.reserve(a, 101)  # one call over its budget
    assert e.value.code == "overloaded" and intake.held == 0
    intake.reserve(a, 100)
    with pytest.raises(Overloaded):
        intake.reserve(a, 60)  # this caller's calls in flight: 160 > 150
    intake.reserve(b, 90)
    with pytest.raises(Overloaded):
        intake.reserve(c, 20)  # everything in flight: 210 > 200, though c has nothing
    assert intake.held == 190
    intake.release(a, 100)
    intake.reserve(c, 20)  # room again once a's call is answered
    intake.release(b, 90)
    intake.release(c, 20)
    assert intake.held == 0
    intake.reserve(a, 100)
    assert intake.held == 100
    assert Intake.caller(None) == Intake.caller("not bytes") == b""  # unenforced: one name


def test_a_big_payload_is_decoded_off_the_event_loop_to_the_same_transaction() -> None:
    tx = ContextTx(base_version=0, ops=(Derive(id="big", body=((Symbol("t"), "x" * 200_000),)),))
    payload = tx_to_msgpack(tx)
    little = ContextTx(base_version=0, ops=(Derive(id="small", body=((Symbol("t"), 1),)),))
    small = tx_to_msgpack(little)
    intake = Intake(inline_bytes=64 << 10)

    async def run() -> tuple[SubmittedTx, SubmittedTx]:
        got = await intake.decode(payload)
        inline = await intake.decode(small)
        with pytest.raises(WireError):
            await intake.decode(b"\xc1" * (100 << 10))  # hostile bytes: typed, off the loop too
        return got, inline

    try:
        got, inline = asyncio.run(run())
    finally:
        intake.shutdown()
    assert got.tx == tx and inline.tx == little
    assert intake.offloaded == 2  # the two big ones, not the small one
