"""One round trip per attempt through a context actor: ``read_for_update`` is one consistent
read, receipts carry what a writer needs to go on, and ``update`` never loses or duplicates
an update of a hot frame under concurrent writers (checked by the history checker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors import ContextHandle
from actors.client.updates import UpdateResult
from harness.checker import Submission
from harness.loadtest.checks import check_context, submissions_of
from protocol.errors import RequestError
from protocol.forms import Symbol
from protocol.receipts import Conflict
from protocol.tx import ContextTx, Derive, Revise
from service.admin import export_history

pytestmark = pytest.mark.ray

HOT = "shared/counter"
WRITERS = 8
UPDATES = 6


def _count(frame: dict[str, Any]) -> int:
    return int(frame["body_forms"][0][1])


def _bump(frame: dict[str, Any] | None) -> tuple[Any, ...]:
    assert frame is not None
    return ((Symbol("count"), _count(frame) + 1),)


def _records(thread: str, result: UpdateResult) -> list[dict[str, Any]]:
    out = []
    for tx, r in result.submitted:
        reads, writes = tx.footprint()
        out.append(
            {
                "client_id": r.client_id,
                "thread": thread,
                "base_version": tx.base_version,
                "footprint": sorted(reads | writes),
                "outcome": r.status,
                "version": r.version,
                "conflicts": [[c.id, c.version] for c in r.conflicts],
                "error_code": r.errors[0].code if r.errors else None,
                "duplicate": r.duplicate,
            }
        )
    return out


def test_update_loses_and_duplicates_nothing_under_eight_writers(handle: ContextHandle) -> None:
    assert handle.submit(
        ContextTx(base_version=0, ops=(Derive(id=HOT, body=((Symbol("count"), 0),)),))
    ).committed
    reads: list[Any] = []

    async def writer(k: int) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        known = None
        for _ in range(UPDATES):
            result = await handle.update_async(HOT, _bump, reason=f"w{k}", known=known)
            assert result.committed, result.receipt
            known = result.frame
            records += _records(f"w{k}", result)
        return records

    async def reader() -> None:
        for _ in range(20):
            reads.append(await handle.read_for_update_async([HOT]))

    async def run() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(writer(k) for k in range(WRITERS)), reader()))[:WRITERS]

    per_writer = asyncio.run(run())
    records = [r for rs in per_writer for r in rs]
    # Every committed update was an increment of the one frame, so at version v the
    # counter is v - 1 (the derive was version 1): a read is consistent exactly when
    # its body matches its version.
    for got in reads:
        assert _count(got.frames[HOT]) == got.version - 1
    assert _count(handle.frame(HOT)) == WRITERS * UPDATES
    assert sum(r["outcome"] == "committed" for r in records) == WRITERS * UPDATES
    subs = submissions_of(records)
    assert all(isinstance(s, Submission) for s in subs)
    verdict = check_context(records, export_history(handle))
    assert verdict.ok, verdict.to_dict()


def test_receipts_carry_the_new_state_through_the_actor(handle: ContextHandle) -> None:
    for fid in ("a", "b"):
        base = handle.version()
        handle.submit(ContextTx(base_version=base, ops=(Derive(id=fid, body=((Symbol("n"), 0),)),)))
    base = handle.version()
    won = handle.submit(
        ContextTx(base_version=base, ops=(Revise(id="a", body=((Symbol("n"), 1),)),))
    )
    lost = handle.submit(
        ContextTx(base_version=base, ops=(Revise(id="a", body=((Symbol("n"), 2),)),))
    )
    assert not lost.committed and lost.version == won.version
    assert [(c.id, c.version, c.body) for c in lost.current] == [("a", won.version, "(n 1)")]
    assert lost.changed_since_base == (Conflict(id="a", version=won.version),)
    rebased = handle.submit(
        ContextTx(base_version=base, ops=(Revise(id="b", body=((Symbol("n"), 1),)),))
    )
    assert rebased.committed and rebased.rebased and rebased.changed_since_base == ()
    got = handle.read_for_update(["a", "b", "nope"])
    assert got.version == rebased.version
    assert got.frames["a"] is not None and got.frames["a"]["body"] == "(n 1)"
    assert got.frames["nope"] is None


def test_bad_update_input_is_refused_before_any_call(handle: ContextHandle) -> None:
    version = handle.version()
    with pytest.raises(RequestError):
        handle.read_for_update("abc")
    with pytest.raises(RequestError):
        handle.read_for_update([1])  # type: ignore[list-item]
    with pytest.raises(RequestError):
        handle.update(5, _bump)  # type: ignore[arg-type]
    with pytest.raises(RequestError):
        handle.update("a", _bump, max_attempts=0)
    with pytest.raises(RequestError):
        handle.update("a", _bump, backoff=0.1)  # type: ignore[arg-type]
    with pytest.raises(RequestError):
        handle.update("a", _bump, known={"version": "x"})
    assert handle.version() == version
