"""Gathering in the group-commit inbox (actors/server/inbox.py), without Ray: callers that
send again as soon as they are answered share one write instead of alternating between
writes in cohorts, and a lone caller's write starts as soon as it arrives."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from actors.server.inbox import Inbox
from protocol.forms import Symbol
from protocol.receipts import Receipt
from protocol.tx import ContextTx, Derive, Revise
from protocol.txwire import SubmittedTx
from service.context import Context
from storage.memory import MemoryBackend

WRITE_SECONDS = 0.15
"""How long each write takes here (a slow disk): callers answered by a write come back
long before the next one would end."""


class SlowStore:
    """A real context on the in-memory backend whose every group write takes *seconds*
    (:data:`WRITE_SECONDS` by default); it notes how many transactions each write held."""

    def __init__(self, seconds: float = WRITE_SECONDS) -> None:
        self.ctx = Context(MemoryBackend())
        self.groups: list[int] = []
        self.seconds = seconds

    def commit_many(self, txs: list[SubmittedTx]) -> list[Receipt]:
        time.sleep(self.seconds)
        self.groups.append(len(txs))
        return self.ctx.commit_many(txs)


async def _writers(
    inbox: Inbox, writers: int, rounds: int, tag: str = "w", work: float = 0.002
) -> None:
    async def writer(i: int) -> None:
        if i:  # the others arrive while the first one's write is in progress
            await asyncio.sleep(WRITE_SECONDS / 5)
        frame, version = f"{tag}{i}/note", 0
        for n in range(rounds):
            op = Revise if n else Derive
            tx = ContextTx(
                base_version=version,
                ops=(op(id=frame, body=((Symbol("n"), n),)),),
                client_id=f"{tag}{i}-{n}",
            )
            got = await inbox.submit(SubmittedTx(tx))
            assert isinstance(got, dict) and got["status"] == "committed", got
            version = got["version"]
            await asyncio.sleep(work)  # the caller's own work before its next transaction

    await asyncio.gather(*(writer(i) for i in range(writers)))


def test_callers_answered_together_commit_together_again() -> None:
    store, executor = SlowStore(), ThreadPoolExecutor(1)
    inbox = Inbox(executor, store.commit_many, gather=0.3)
    asyncio.run(_writers(inbox, 4, 6))
    executor.shutdown()
    # the first write holds the first arrival; the other three arrive during it and the
    # first one comes back while the second waits for it: from then on, all four each time
    # (on an idle machine exactly [1, 4, 4, 4, 4, 4, 3]; a loaded one may split a cohort once)
    assert sum(store.groups) == 24 and store.groups.count(4) >= 4, store.groups
    assert len(store.groups) <= 8, store.groups
    assert store.ctx.version() == 24
    assert 1 <= inbox.waited_out <= 2  # the last write waits out its bound: the first is done
    gathered = len(store.groups)

    # without gathering they alternate in cohorts: more writes for the same transactions
    store, executor = SlowStore(), ThreadPoolExecutor(1)
    asyncio.run(_writers(Inbox(executor, store.commit_many, gather=0.0), 4, 6))
    executor.shutdown()
    assert sum(store.groups) == 24 and len(store.groups) > gathered, store.groups


def test_a_lone_caller_never_waits_and_a_caller_gone_is_waited_for_boundedly() -> None:
    store, executor = SlowStore(), ThreadPoolExecutor(1)
    inbox = Inbox(executor, store.commit_many, gather=0.3)
    asyncio.run(_writers(inbox, 1, 5))
    assert store.groups == [1] * 5
    assert inbox.waited_out == 0  # its own return is the one expected each time

    async def one_stops() -> None:
        # two callers answered by one write; one of them never sends again
        await _writers(inbox, 2, 1, "a")
        await _writers(inbox, 1, 1, "b")

    asyncio.run(one_stops())
    executor.shutdown()
    assert inbox.waited_out == 1  # the next write waited for it, then went ahead
    assert store.ctx.version() == 8


def test_callers_slower_than_the_write_are_waited_for() -> None:
    # a fast disk (10 ms writes) and callers that take 60 ms to send again: waiting no
    # longer than a write took, the next write would start with the first caller back, and
    # the cohorts the first round split the callers into ([1, 3, 1, 3, ...]) would stay split
    store, executor = SlowStore(0.01), ThreadPoolExecutor(1)
    inbox = Inbox(executor, store.commit_many, gather=0.5)
    asyncio.run(_writers(inbox, 4, 8, work=0.06))
    executor.shutdown()
    assert sum(store.groups) == 32 and store.ctx.version() == 32
    # (on an idle machine [1, 3, 4, 4, 4, 4, 4, 4, 4])
    assert store.groups.count(4) >= 5 and len(store.groups) <= 12, store.groups
