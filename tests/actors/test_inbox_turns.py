"""Turns on a hot frame in the group-commit inbox (actors/server/inbox.py), without Ray: writers on
one frame are answered a conflict one at a time, each on the frame as the previous writer's
commit left it, and a writer that never retries holds its turn only for ``hold`` seconds."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from actors.client.updates import Updater
from actors.server.inbox import Inbox
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.tx import ContextTx, Derive, Revise
from protocol.txwire import SubmittedTx
from service.context import Context
from storage.memory import MemoryBackend

HOT = "shared/counter"


def _bump(frame: dict[str, Any] | None) -> tuple[Any, ...]:
    assert frame is not None
    return ((Symbol("count"), int(frame["body_forms"][0][1]) + 1),)


class Rig:
    """A real context on the in-memory backend behind an inbox, on one store thread."""

    def __init__(self, hold: float, max_held: int = 64) -> None:
        self.ctx = Context(MemoryBackend())
        self.executor = ThreadPoolExecutor(1)
        self.inbox = Inbox(self.executor, self.ctx.commit_many, hold=hold, max_held=max_held)
        self.ctx.commit(
            ContextTx(
                base_version=self.ctx.version(), ops=(Derive(id=HOT, body=((Symbol("count"), 0),)),)
            )
        )
        self.client = 0

    async def submit(self, tx: ContextTx) -> Receipt:
        self.client += 1
        tx = tx.model_copy(update={"client_id": f"c-{self.client}"})
        got = await self.inbox.submit(SubmittedTx(tx))
        assert isinstance(got, dict), got
        return Receipt.from_dict(got)

    async def updates(self, n: int) -> tuple[int, int]:
        """*n* read-modify-writes of the hot frame, each retried from its rejection receipt
        at once; (commits, rejections)."""
        known: dict[str, Any] | None = None
        rejections = 0
        for _ in range(n):
            up = Updater(HOT, _bump, "bump", 1000)
            if known is None:
                up.read(self.ctx.read_for_update([HOT]).model_dump())
            else:
                up.known(known)
            while True:
                tx = up.tx()
                receipt = await self.submit(tx)
                done = up.outcome(tx, receipt)
                if done is not None:
                    assert done, receipt.errors
                    break
                assert up.rebased(receipt), "a conflict receipt carries the frame"
            rejections += up.rejections
            known = up.state
        return n, rejections

    def count(self) -> int:
        return int(self.ctx.frame(HOT).body_forms[0][1])


@pytest.mark.parametrize("writers", [2, 8])
def test_writers_on_one_frame_lose_nothing_and_take_turns(writers: int) -> None:
    rig = Rig(hold=5.0)  # a long hold: every pass of a turn here is by a commit

    async def main() -> list[tuple[int, int]]:
        return await asyncio.gather(*(rig.updates(20) for _ in range(writers)))

    results = asyncio.run(main())
    commits = sum(c for c, _ in results)
    rejections = sum(r for _, r in results)
    assert rig.count() == commits == 20 * writers
    assert rejections / commits <= writers - 1
    if writers > 2:
        assert (
            rig.inbox.metrics.stats.held > 0
        )  # writers waited for their turn instead of colliding again
    assert not rig.inbox._turn or not any(rig.inbox._held.values())
    # Every turn passed with its writer's commit (a field edit, as the updater writes):
    # none had to lapse for the next writer to be decided.
    assert rig.inbox.lapsed == 0


def test_a_writer_that_never_retries_holds_the_turn_only_for_hold_seconds() -> None:
    rig = Rig(hold=0.05)

    async def main() -> list[Receipt]:
        base = rig.ctx.version()
        await rig.submit(
            ContextTx(base_version=base, ops=(Revise(id=HOT, body=((Symbol("count"), 1),)),))
        )
        stale = [
            ContextTx(base_version=base, ops=(Revise(id=HOT, body=((Symbol("count"), 9),)),))
            for _ in range(3)
        ]
        # All three conflict; the first takes the turn and never retries, so the other
        # two are answered only as the turns lapse, each with the frame as it stands.
        return await asyncio.wait_for(asyncio.gather(*(rig.submit(t) for t in stale)), 5.0)

    receipts = asyncio.run(main())
    assert [r.status for r in receipts] == ["rejected"] * 3
    assert all(r.errors[0].code == "conflict" for r in receipts)
    assert all(r.current and r.current[0].body == "(count 1)" for r in receipts)
    assert rig.inbox.metrics.stats.held == 2
    assert rig.count() == 1


def test_hold_zero_answers_every_rejection_at_once() -> None:
    rig = Rig(hold=0.0)

    async def main() -> list[Receipt]:
        base = rig.ctx.version()
        await rig.submit(
            ContextTx(base_version=base, ops=(Revise(id=HOT, body=((Symbol("count"), 1),)),))
        )
        stale = ContextTx(base_version=base, ops=(Revise(id=HOT, body=((Symbol("count"), 9),)),))
        return await asyncio.gather(*(rig.submit(stale) for _ in range(3)))

    receipts = asyncio.run(main())
    assert all(r.errors[0].code == "conflict" for r in receipts)
    assert rig.inbox.metrics.stats.held == 0


def test_the_line_for_one_frame_is_capped_and_the_rest_answered_at_once() -> None:
    """A crowd of stale writers on one frame: the turn's owner and two waiters are held
    (max_held=2), every other one is answered its rejection at once instead of waiting
    in memory without bound."""
    rig = Rig(hold=10.0, max_held=2)  # a turn lapses only after 10 s: no one is let go here

    async def main() -> tuple[list[Receipt], int]:
        base = rig.ctx.version()
        await rig.submit(
            ContextTx(base_version=base, ops=(Revise(id=HOT, body=((Symbol("count"), 1),)),))
        )
        stale = ContextTx(base_version=base, ops=(Revise(id=HOT, body=((Symbol("count"), 9),)),))
        tasks = [asyncio.ensure_future(rig.submit(stale)) for _ in range(10)]
        answered: list[Receipt] = []
        for _ in range(3000):  # until the first group is decided (the held ones stay)
            answered = [t.result() for t in tasks if t.done()]
            if len(answered) == 8:
                break
            await asyncio.sleep(0.01)
        waiting = len(rig.inbox._held[HOT])
        for t in tasks:
            t.cancel()
        return answered, waiting

    answered, waiting = asyncio.run(main())
    assert len(answered) == 8 and waiting == 2
    assert all(r.errors[0].code == "conflict" for r in answered)
    assert all(r.current and r.current[0].body == "(count 1)" for r in answered)
    assert rig.inbox.metrics.stats.held == 2
    assert rig.count() == 1
